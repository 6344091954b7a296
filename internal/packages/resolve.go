// Package packages turns what an agent asks for ("PIL", "sklearn==1.5",
// "lodash") into the distributions to install, and keeps the layers they are
// installed into: built once per set in a build sandbox, shared read-only by
// every sandbox that asks for the same set, evicted least recently used.
package packages

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	pep440 "github.com/aquasecurity/go-pep440-version"

	"github.com/codecell/codecell/internal/errdefs"
)

// Request is what a caller asks for, by import or distribution name.
type Request struct {
	Python     []string `json:"python,omitempty"`
	JavaScript []string `json:"javascript,omitempty"`
}

// Empty reports whether nothing is asked for.
func (r Request) Empty() bool { return len(r.Python) == 0 && len(r.JavaScript) == 0 }

// Plan is what a Request comes to: requirements to install, and what needs
// no install and why.
type Plan struct {
	Python     []string          `json:"python"`     // pip requirements, normalized and sorted
	JavaScript []string          `json:"javascript"` // npm specs, sorted
	Skipped    map[string]string `json:"skipped"`    // asked-for name -> why it needs no install
	Corrected  map[string]string `json:"corrected"`  // asked-for name -> the name used
}

// Empty reports whether nothing needs installing.
func (p Plan) Empty() bool { return len(p.Python) == 0 && len(p.JavaScript) == 0 }

// Env is what the sandbox image already has, read from its interpreters
// (see Probe).
type Env struct {
	Python       string            // version, e.g. 3.11.2
	Node         string            // version, e.g. v20.20.2
	Stdlib       map[string]bool   // sys.stdlib_module_names
	Modules      map[string]bool   // top-level modules importable
	Dists        map[string]string // normalized distribution name -> version
	NodeBuiltins map[string]bool   // require('module').builtinModules
}

// importToDist maps import names to the distribution that provides them,
// where the two differ. Keys are matched case-insensitively.
var importToDist = map[string]string{
	"pil": "pillow", "cv2": "opencv-python", "sklearn": "scikit-learn", "skimage": "scikit-image",
	"yaml": "pyyaml", "bs4": "beautifulsoup4", "dateutil": "python-dateutil", "dotenv": "python-dotenv",
	"jwt": "pyjwt", "crypto": "pycryptodome", "docx": "python-docx", "pptx": "python-pptx",
	"magic": "python-magic", "serial": "pyserial", "usb": "pyusb", "attr": "attrs", "openssl": "pyopenssl",
	"jose": "python-jose", "fitz": "pymupdf", "zmq": "pyzmq", "psycopg2": "psycopg2-binary",
	"mysqldb": "mysqlclient", "wx": "wxpython", "gi": "pygobject", "cairo": "pycairo", "bio": "biopython",
	"nacl": "pynacl", "git": "gitpython", "kafka": "kafka-python", "telegram": "python-telegram-bot",
	"slugify": "python-slugify", "multipart": "python-multipart", "socks": "pysocks",
	"mpl_toolkits": "matplotlib", "pkg_resources": "setuptools", "osgeo": "gdal", "faiss": "faiss-cpu",
	"umap": "umap-learn", "grpc": "grpcio", "websocket": "websocket-client", "xlib": "python-xlib",
	"ldap": "python-ldap", "snappy": "python-snappy", "pdfminer": "pdfminer.six", "cattr": "cattrs",
	"google.protobuf": "protobuf", "ruamel": "ruamel.yaml", "Levenshtein": "levenshtein",
	"sentence_transformers": "sentence-transformers", "tensorflow_hub": "tensorflow-hub",
}

// typos are names agents get wrong, mapped to what they meant. Some wrong
// names are real packages on PyPI (typo-squats), which is why we correct
// instead of installing them.
var typos = map[string]string{
	"dataclass": "dataclasses", "request": "requests", "panda": "pandas", "maths": "math",
	"collection": "collections", "itertool": "itertools", "datatime": "datetime", "sklean": "sklearn",
	"scikitlearn": "sklearn", "beautifulsoup": "bs4", "opencv": "cv2", "pil": "PIL", "numpys": "numpy",
	"matplot": "matplotlib", "pyplot": "matplotlib", "typing_extension": "typing_extensions",
	"urllib2": "urllib", "urlparse": "urllib", "cpickle": "pickle", "configparse": "configparser",
}

var (
	pyName    = `[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?`
	pyClause  = `(?:===|==|!=|<=|>=|~=|<|>)\s*[A-Za-z0-9.*+!_-]+`
	pyReq     = regexp.MustCompile(`^\s*(` + pyName + `)\s*(\[\s*` + pyName + `(?:\s*,\s*` + pyName + `)*\s*\])?\s*(` + pyClause + `(?:\s*,\s*` + pyClause + `)*)?\s*$`)
	npmName   = `(?:@[a-z0-9~-][a-z0-9._~-]*/)?[a-z0-9~-][a-z0-9._~-]*`
	npmReq    = regexp.MustCompile(`^(` + npmName + `)(?:@([0-9A-Za-z.^~<>=|* +-]+))?$`)
	separator = regexp.MustCompile(`[-_.]+`)
)

// Normalize is PEP 503's distribution name normalization.
func Normalize(name string) string { return strings.ToLower(separator.ReplaceAllString(name, "-")) }

// Resolve turns a request into a plan against what env already has.
func Resolve(req Request, env *Env) (Plan, error) {
	plan := Plan{Skipped: map[string]string{}, Corrected: map[string]string{}}
	if len(req.Python)+len(req.JavaScript) > 100 {
		return plan, fmt.Errorf("%d packages asked for; at most 100 per request: %w", len(req.Python)+len(req.JavaScript), errdefs.ErrInvalid)
	}
	py := map[string]bool{}
	for _, raw := range req.Python {
		r, err := resolvePython(raw, env, &plan)
		if err != nil {
			return plan, err
		}
		if r != "" {
			py[r] = true
		}
	}
	js := map[string]bool{}
	for _, raw := range req.JavaScript {
		r, err := resolveNode(raw, env, &plan)
		if err != nil {
			return plan, err
		}
		if r != "" {
			js[r] = true
		}
	}
	plan.Python, plan.JavaScript = sortedKeys(py), sortedKeys(js)
	return plan, nil
}

func resolvePython(raw string, env *Env, plan *Plan) (string, error) {
	m := pyReq.FindStringSubmatch(raw)
	if m == nil {
		return "", fmt.Errorf("python package %q: expected an import or distribution name with optional [extras] and version specifiers, such as \"requests>=2.31\" (URLs, paths, options and markers are not accepted): %w", raw, errdefs.ErrInvalid)
	}
	name, extras, spec := m[1], strings.ReplaceAll(m[2], " ", ""), strings.ReplaceAll(m[3], " ", "")
	if fixed, ok := typos[strings.ToLower(name)]; ok && fixed != name {
		plan.Corrected[raw] = fixed
		name = fixed
	}
	top, _, dotted := strings.Cut(name, ".")
	if dotted && (env.Stdlib[top] || env.Modules[top] || importToDist[strings.ToLower(top)] != "") && importToDist[strings.ToLower(name)] == "" {
		// "matplotlib.pyplot" is the matplotlib package; "zope.interface"
		// stays the distribution it names.
		name = top
	}
	if env.Stdlib[name] && extras == "" && spec == "" {
		plan.Skipped[raw] = "standard library"
		return "", nil
	}
	dist := name
	if d, ok := importToDist[strings.ToLower(name)]; ok {
		dist = d
	}
	dist = Normalize(dist)
	if have, ok := env.Dists[dist]; ok && extras == "" {
		if spec == "" {
			plan.Skipped[raw] = fmt.Sprintf("preinstalled (%s %s)", dist, have)
			return "", nil
		}
		if satisfies(have, spec) {
			plan.Skipped[raw] = fmt.Sprintf("preinstalled (%s %s satisfies %s)", dist, have, spec)
			return "", nil
		}
	} else if !ok && spec == "" && extras == "" && env.Modules[name] {
		plan.Skipped[raw] = "preinstalled"
		return "", nil
	}
	return dist + extras + spec, nil
}

// satisfies reports whether version meets a PEP 440 specifier set; anything
// unparsable counts as not met, so it is installed.
func satisfies(version, spec string) bool {
	v, err := pep440.Parse(version)
	if err != nil {
		return false
	}
	s, err := pep440.NewSpecifiers(spec)
	if err != nil {
		return false
	}
	return s.Check(v)
}

func resolveNode(raw string, env *Env, plan *Plan) (string, error) {
	name := strings.TrimSpace(raw)
	if b, ok := strings.CutPrefix(name, "node:"); ok && env.NodeBuiltins[b] {
		plan.Skipped[raw] = "node built-in"
		return "", nil
	}
	m := npmReq.FindStringSubmatch(name)
	if m == nil {
		return "", fmt.Errorf("javascript package %q: expected an npm name with an optional @version range, such as \"lodash@^4.17\" (URLs, paths and git specs are not accepted): %w", raw, errdefs.ErrInvalid)
	}
	if env.NodeBuiltins[m[1]] && m[2] == "" {
		plan.Skipped[raw] = "node built-in"
		return "", nil
	}
	if m[2] != "" {
		return m[1] + "@" + strings.TrimSpace(m[2]), nil
	}
	return m[1], nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
