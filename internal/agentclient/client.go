// Package agentclient is the host side of the agent protocol (see package
// agent's doc): it multiplexes concurrent requests over the one stdin/stdout
// pair of a sandbox and turns the agent's death into an error for every
// caller still waiting.
package agentclient

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/codecell/codecell/internal/agent"
	"github.com/codecell/codecell/internal/errdefs"
)

// ErrAgentGone means the agent's output ended: the sandbox has died.
var ErrAgentGone = fmt.Errorf("sandbox agent exited: %w", errdefs.ErrUnavailable)

// Client talks to one agent.
type Client struct {
	wmu sync.Mutex
	w   io.WriteCloser
	enc *json.Encoder

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]chan agent.Event

	ready    chan agent.Ready
	gone     chan struct{}
	closeErr error
}

// New starts reading events from r; requests are written to w.
func New(w io.WriteCloser, r io.Reader) *Client {
	c := &Client{w: w, enc: json.NewEncoder(w), pending: map[uint64]chan agent.Event{},
		ready: make(chan agent.Ready, 1), gone: make(chan struct{})}
	go c.readLoop(r)
	return c
}

func (c *Client) readLoop(r io.Reader) {
	defer func() {
		c.mu.Lock()
		for id, ch := range c.pending {
			close(ch)
			delete(c.pending, id)
		}
		c.mu.Unlock()
		close(c.gone)
	}()
	dec := json.NewDecoder(bufio.NewReaderSize(r, 256*1024))
	for {
		var ev agent.Event
		if err := dec.Decode(&ev); err != nil {
			return
		}
		if ev.Type == agent.EvReady && ev.Ready != nil {
			c.ready <- *ev.Ready
			continue
		}
		c.mu.Lock()
		ch := c.pending[ev.ID]
		c.mu.Unlock()
		if ch != nil {
			// Output events are small and frequent; the final one must not be
			// lost, so the channel is generously buffered and we block if full.
			ch <- ev
		}
	}
}

// WaitReady blocks until the agent has started (and the zygote preloaded).
func (c *Client) WaitReady(ctx context.Context) (agent.Ready, error) {
	select {
	case r := <-c.ready:
		return r, nil
	case <-c.gone:
		return agent.Ready{}, ErrAgentGone
	case <-ctx.Done():
		return agent.Ready{}, ctx.Err()
	}
}

// Gone is closed when the agent has exited.
func (c *Client) Gone() <-chan struct{} { return c.gone }

func (c *Client) call(ctx context.Context, req agent.Request, onEvent func(agent.Event)) (agent.Event, error) {
	ch := make(chan agent.Event, 64)
	c.mu.Lock()
	c.nextID++
	req.ID = c.nextID
	c.pending[req.ID] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, req.ID)
		c.mu.Unlock()
	}()

	c.wmu.Lock()
	err := c.enc.Encode(req)
	c.wmu.Unlock()
	if err != nil {
		return agent.Event{}, fmt.Errorf("send %s: %w", req.Op, ErrAgentGone)
	}
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return agent.Event{}, ErrAgentGone
			}
			switch ev.Type {
			case agent.EvOutput:
				if onEvent != nil {
					onEvent(ev)
				}
				continue
			case agent.EvError:
				return ev, eventError(ev)
			}
			return ev, nil
		case <-ctx.Done():
			if req.Op == agent.OpExec {
				// The caller is gone; the run must not go on without it.
				go func() {
					c.wmu.Lock()
					defer c.wmu.Unlock()
					c.enc.Encode(agent.Request{Op: agent.OpCancel, Target: req.ID})
				}()
			}
			return agent.Event{}, ctx.Err()
		}
	}
}

// Exec runs one program. onOutput, if set, sees chunks as they are produced
// (set req.Stream for that).
func (c *Client) Exec(ctx context.Context, req *agent.ExecRequest, onOutput func(stream string, data []byte)) (*agent.ExecResult, error) {
	var on func(agent.Event)
	if onOutput != nil {
		on = func(ev agent.Event) { onOutput(ev.Stream, ev.Data) }
	}
	ev, err := c.call(ctx, agent.Request{Op: agent.OpExec, Exec: req}, on)
	if err != nil {
		return nil, err
	}
	if ev.Result == nil {
		return nil, fmt.Errorf("agent answered exec with %q", ev.Type)
	}
	return ev.Result, nil
}

// Scrub empties the sandbox for its next user.
func (c *Client) Scrub(ctx context.Context) error {
	_, err := c.call(ctx, agent.Request{Op: agent.OpScrub}, nil)
	return err
}

// eventError keeps the class of an agent's error, so the API answers with
// the right status.
func eventError(ev agent.Event) error {
	switch ev.Code {
	case agent.ErrCodeInvalid:
		return fmt.Errorf("%s: %w", ev.Error, errdefs.ErrInvalid)
	case agent.ErrCodeNotFound:
		return fmt.Errorf("%s: %w", ev.Error, errdefs.ErrNotFound)
	case agent.ErrCodeTooLarge:
		return fmt.Errorf("%s: %w", ev.Error, errdefs.ErrTooLarge)
	}
	return errors.New(ev.Error)
}

// File carries out a file request; onData sees the bytes a read sends.
func (c *Client) File(ctx context.Context, req *agent.FileRequest, onData func([]byte)) (*agent.FileResult, error) {
	var on func(agent.Event)
	if onData != nil {
		on = func(ev agent.Event) { onData(ev.Data) }
	}
	ev, err := c.call(ctx, agent.Request{Op: agent.OpFile, File: req}, on)
	if err != nil {
		return nil, err
	}
	if ev.File == nil {
		return nil, fmt.Errorf("agent answered a file request with %q", ev.Type)
	}
	return ev.File, nil
}

// StartDisplay starts the sandbox's X server (once).
func (c *Client) StartDisplay(ctx context.Context, screen string) (*agent.DisplayInfo, error) {
	ev, err := c.call(ctx, agent.Request{Op: agent.OpDisplay, Display: &agent.DisplayRequest{Screen: screen}}, nil)
	if err != nil {
		return nil, err
	}
	return ev.Display, nil
}

// Screenshot returns a PNG of the sandbox's screen.
func (c *Client) Screenshot(ctx context.Context, req *agent.ScreenshotRequest) ([]byte, error) {
	ev, err := c.call(ctx, agent.Request{Op: agent.OpScreenshot, Screenshot: req}, nil)
	return ev.Data, err
}

// Input injects mouse and keyboard input; the answer is a PNG if asked for.
func (c *Client) Input(ctx context.Context, req *agent.InputRequest) ([]byte, error) {
	ev, err := c.call(ctx, agent.Request{Op: agent.OpInput, Input: req}, nil)
	return ev.Data, err
}

// Processes counts what the code started and is still running.
func (c *Client) Processes(ctx context.Context) (int, error) {
	ev, err := c.call(ctx, agent.Request{Op: agent.OpProcesses}, nil)
	return ev.Count, err
}

// Close ends the conversation; the agent exits on EOF.
func (c *Client) Close() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.w.Close()
}
