package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/codecell/codecell/internal/errdefs"
)

// Pool keeps size sandboxes of one kind warm. Each sandbox serves one run at
// a time, is scrubbed after it, and is replaced after maxReuse runs or when a
// scrub fails. Replacements are made in the background, off the request path.
type Pool struct {
	name     string
	runtime  string
	dyn      *dynamicPool // set for a package set's pool
	create   func(context.Context) (*Sandbox, error)
	idle     chan *Sandbox
	maxReuse int
	queue    int64 // callers allowed to wait for a sandbox
	waiting  atomic.Int64
	log      *slog.Logger

	ctx    context.Context // lives as long as the pool; cancels creators on Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	all     map[*Sandbox]bool
	lastErr error         // why the last creation failed; nil once one succeeds
	started bool          // a sandbox was made once: the runtime works
	failed  chan struct{} // closed (and replaced) when a creation fails, to wake waiters
}

// NewPool starts filling a pool of size sandboxes.
func NewPool(name, runtime string, size, maxReuse, queue int, create func(context.Context) (*Sandbox, error), log *slog.Logger) *Pool {
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pool{name: name, runtime: runtime, create: create, idle: make(chan *Sandbox, size), maxReuse: maxReuse,
		queue: int64(queue), log: log.With("pool", name), ctx: ctx, cancel: cancel, all: map[*Sandbox]bool{}, failed: make(chan struct{})}
	for range size {
		p.refill()
	}
	return p
}

// refill creates one sandbox in the background, retrying with back-off.
func (p *Pool) refill() {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		backoff := 100 * time.Millisecond
		for p.ctx.Err() == nil {
			ctx, cancel := context.WithTimeout(p.ctx, 2*time.Minute)
			sb, err := p.create(ctx)
			cancel()
			if err == nil {
				p.mu.Lock()
				closed := p.ctx.Err() != nil
				if !closed {
					p.all[sb] = true
					p.lastErr = nil
					p.started = true
				}
				p.mu.Unlock()
				if closed {
					sb.Destroy(context.Background())
					return
				}
				p.idle <- sb
				return
			}
			if p.ctx.Err() != nil {
				return
			}
			p.mu.Lock()
			p.lastErr = err
			close(p.failed)
			p.failed = make(chan struct{})
			p.mu.Unlock()
			p.log.Error("create sandbox", "err", err)
			select {
			case <-time.After(backoff):
			case <-p.ctx.Done():
			}
			backoff = min(backoff*2, 10*time.Second)
		}
	}()
}

// Acquire takes a warm sandbox, waiting for one if the queue has room.
func (p *Pool) Acquire(ctx context.Context) (*Sandbox, error) {
	select {
	case sb := <-p.idle:
		return sb, nil
	default:
	}
	if p.waiting.Add(1) > p.queue {
		p.waiting.Add(-1)
		return nil, fmt.Errorf("all %s sandboxes are busy and %d requests are already waiting: %w", p.name, p.queue, errdefs.ErrExhausted)
	}
	defer p.waiting.Add(-1)
	for {
		p.mu.Lock()
		lastErr, failed := p.lastErr, p.failed
		p.mu.Unlock()
		if lastErr != nil {
			return nil, fmt.Errorf("%s sandboxes cannot be started: %v: %w", p.name, lastErr, errdefs.ErrUnavailable)
		}
		select {
		case sb := <-p.idle:
			return sb, nil
		case <-failed:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for a free %s sandbox: %w", p.name, ctx.Err())
		case <-p.ctx.Done():
			return nil, fmt.Errorf("server is shutting down: %w", errdefs.ErrUnavailable)
		}
	}
}

// Claim takes a warm sandbox out of the pool for good: the caller owns it and
// destroys it; the pool starts a replacement at once.
func (p *Pool) Claim(ctx context.Context) (*Sandbox, error) {
	sb, err := p.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	delete(p.all, sb)
	p.mu.Unlock()
	if p.ctx.Err() == nil {
		p.refill()
	}
	return sb, nil
}

// Release hands a sandbox back after a run. Scrubbing happens here, in the
// background, so the caller's response is not delayed by it.
func (p *Pool) Release(sb *Sandbox) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if sb.uses.Load() < int64(p.maxReuse) && sb.Alive() && p.ctx.Err() == nil {
			ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
			err := sb.Scrub(ctx)
			cancel()
			if err == nil {
				p.idle <- sb
				return
			}
			if !errors.Is(err, context.Canceled) {
				p.log.Warn("scrub failed; replacing sandbox", "sandbox", sb.ID, "err", err)
			}
		}
		p.discard(sb)
	}()
}

// discard destroys a sandbox and starts its replacement.
func (p *Pool) discard(sb *Sandbox) {
	p.mu.Lock()
	delete(p.all, sb)
	p.mu.Unlock()
	sb.Destroy(context.Background())
	if p.ctx.Err() == nil {
		p.refill()
	}
}

// Stats is a snapshot for health and metrics.
type Stats struct {
	Ready   bool   `json:"ready"` // the pool has made sandboxes and its last attempt worked
	Size    int    `json:"size"`
	Idle    int    `json:"idle"`
	Waiting int64  `json:"waiting"`
	Error   string `json:"error,omitempty"`
}

// Stats reports the pool's state.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := Stats{Ready: p.started && p.lastErr == nil, Size: len(p.all), Idle: len(p.idle), Waiting: p.waiting.Load()}
	if p.lastErr != nil {
		s.Error = p.lastErr.Error()
	}
	return s
}

// WaitReady blocks until at least one sandbox is idle (the pool can run code).
func (p *Pool) WaitReady(ctx context.Context) error {
	for {
		if len(p.idle) > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Close destroys every sandbox, idle or busy, and waits for background work.
func (p *Pool) Close() {
	p.cancel()
	p.mu.Lock()
	all := make([]*Sandbox, 0, len(p.all))
	for sb := range p.all {
		all = append(all, sb)
	}
	p.all = map[*Sandbox]bool{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, sb := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb.Destroy(context.Background())
		}()
	}
	wg.Wait()
	p.wg.Wait()
}
