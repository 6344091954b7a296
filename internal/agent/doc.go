// Package agent is the code that runs inside every sandbox as its init
// (`codecell agent`), and the wire protocol the host speaks with it.
//
// # Transport
//
// The host starts the container with the agent's stdin and stdout connected to
// pipes. Those are the only channel: no socket is shared with the host, which
// is why the same protocol works unchanged under runc and under gVisor (runsc
// donates the stdio descriptors to the sandbox). When stdin reaches EOF the
// host is gone, and the agent exits, which ends the container and everything
// in it.
//
// # Messages
//
// Both directions carry a stream of JSON objects, one per line. Byte fields
// ([]byte) are base64, as encoding/json writes them.
//
// Host → agent: Request{ID, Op, Exec}. Ops:
//
//   - "exec": run Exec (language, code, stdin, env, files, time-out, output cap).
//     Answered by zero or more "output" events (only when Exec.Stream is set)
//     and exactly one "result" (or "error") event with the same ID.
//   - "scrub": kill every process but the agent and the Python zygote, empty
//     /workspace, /tmp, /dev/shm and /dev/mqueue, and remove every System V
//     IPC object. Answered by "done" (or "error").
//
// Agent → host: Event{ID, Type, ...}. Types: "ready" (ID 0, once, after the
// zygote has preloaded its modules; carries Ready), "output" (Stream, Data),
// "result" (Result), "done", "error" (Error: a message for a request that
// could not be carried out, as opposed to code that ran and failed).
//
// Requests are handled concurrently; events of different IDs interleave.
//
// # Processes
//
// The agent is PID 1 of the sandbox and reaps every process in it. Each run
// gets its own session and process group; a time-out kills the whole group
// with SIGKILL. Python runs are forked from the zygote (zygote.py), which
// reports the run's exit status and rusage back to the agent over a
// SOCK_SEQPACKET socket; bash and JavaScript runs are spawned by the agent.
package agent
