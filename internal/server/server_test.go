package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"regexp"
	"testing"

	"github.com/codecell/codecell/api"
	"github.com/codecell/codecell/internal/agent"
	"github.com/codecell/codecell/internal/config"
	"github.com/codecell/codecell/internal/errdefs"
	"github.com/codecell/codecell/internal/packages"
	"github.com/codecell/codecell/internal/sandbox"
)

// refuseExecutor fails any test that reaches execution: these tests are about
// what the server decides before a sandbox is involved.
type refuseExecutor struct{ t testing.TB }

func (r refuseExecutor) Execute(context.Context, sandbox.Target, *agent.ExecRequest, func(string, []byte)) (*sandbox.Result, sandbox.Placed, error) {
	r.t.Fatal("Execute reached")
	return nil, sandbox.Placed{}, nil
}
func (r refuseExecutor) Resolve(packages.Request) (packages.Plan, error) { return packages.Plan{}, nil }
func (r refuseExecutor) Template(name string) (config.Template, error) {
	return config.Template{}, errdefs.ErrInvalid
}
func (r refuseExecutor) Layers() []packages.LayerInfo { return nil }
func (r refuseExecutor) DeleteLayer(string) error     { return errdefs.ErrNotFound }
func (r refuseExecutor) ExecuteShared(context.Context, string, string, *agent.ExecRequest, func(string, []byte)) (*sandbox.Result, error) {
	r.t.Fatal("ExecuteShared reached")
	return nil, nil
}
func (r refuseExecutor) Stats() map[string]sandbox.Stats { return nil }

// Every route is in the OpenAPI document and every documented path is served.
func TestRoutesMatchOpenAPI(t *testing.T) {
	s := New(config.Default(), refuseExecutor{t}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  (/[^:]*):$`).FindAllStringSubmatch(string(api.OpenAPI), -1) {
		documented[m[1]] = true
	}
	served := map[string]bool{}
	for _, r := range s.Routes() {
		served[r.Path] = true
		if !documented[r.Path] {
			t.Errorf("%s %s is served but not in api/openapi.yaml", r.Method, r.Path)
		}
	}
	for p := range documented {
		if !served[p] {
			t.Errorf("%s is documented but not served", p)
		}
	}
}

// FuzzExecuteRequest: any body is either turned into a run or refused as
// invalid, never a panic or another class of error.
func FuzzExecuteRequest(f *testing.F) {
	for _, s := range []string{`{"code":"print(1)"}`, `{"language":"bash","code":"ls","timeout_s":1e308}`, `{"code":"1","files":{"../x":"AA=="}}`, `{"code":"1","env":{"":"x"}}`, `{"timeout_s":-0}`, `null`, `{"code":"1","timeout_s":1e-9}`} {
		f.Add([]byte(s))
	}
	cfg := config.Default()
	s := &Server{cfg: cfg}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req ExecuteRequest
		if err := decodeStrict(body, &req); err != nil {
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("decode error of wrong class: %v", err)
			}
			return
		}
		out, err := s.toAgent(&req)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("validation error of wrong class: %v", err)
			}
			return
		}
		if out.TimeoutMs < 0 || out.TimeoutMs > cfg.MaxTimeout.Milliseconds() {
			t.Fatalf("accepted time-out %d ms outside (0, %d]", out.TimeoutMs, cfg.MaxTimeout.Milliseconds())
		}
		for name := range out.Files {
			if checkRelPath(name) != nil {
				t.Fatalf("accepted file %q", name)
			}
		}
	})
}
