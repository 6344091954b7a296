// codecell JavaScript kernel: one persistent global context for a session.
// Requests arrive on stdin, one JSON line each: {"code", "marker"}. A cell's
// output goes to stdout and stderr as the code writes it, each stream then
// ends with the marker; its result, {"value"} or {"error"}, is one JSON line
// on fd 3. Top-level `let`, `const`, functions and classes persist (they are
// the global scope's), and top-level `await` works, via the transform
// node's own REPL uses.
'use strict';
const fs = require('fs');
const readline = require('readline');
const util = require('util');
const vm = require('vm');

let processTopLevelAwait = null;
try {
  ({ processTopLevelAwait } = require('internal/repl/await')); // needs --expose-internals
} catch {}

let interrupt = null; // rejects the awaited part of the running cell
process.on('SIGINT', () => { if (interrupt) interrupt(); }); // and keeps the kernel alive

function errorOf(e) {
  if (e instanceof Error) return { name: e.name, value: e.message, traceback: e.stack || String(e) };
  return { name: 'Error', value: util.inspect(e), traceback: 'Uncaught ' + util.inspect(e) };
}

async function runCell(code, filename) {
  const wrapped = processTopLevelAwait && code.includes('await') ? processTopLevelAwait(code) : null;
  // breakOnSigint makes a synchronous loop interruptible.
  let value = vm.runInThisContext(wrapped || code, { filename, breakOnSigint: true });
  if (wrapped) {
    const stop = new Promise((_, reject) => {
      interrupt = () => reject(Object.assign(new Error('Script execution interrupted.'), { name: 'Interrupted' }));
    });
    const out = await Promise.race([value, stop]);
    value = out && out.value;
  }
  return value;
}

function write(stream, data) {
  return new Promise((resolve) => stream.write(data, resolve));
}

const rl = readline.createInterface({ input: process.stdin });
const queue = [];
let busy = false;
let n = 0;
rl.on('line', (line) => { queue.push(line); pump(); });

async function pump() {
  if (busy || queue.length === 0) return;
  busy = true;
  const req = JSON.parse(queue.shift());
  n++;
  let result = {};
  try {
    const value = await runCell(req.code, `cell-${n}`);
    if (value !== undefined) result.value = util.inspect(value);
  } catch (e) {
    result.error = errorOf(e);
    await write(process.stderr, result.error.traceback + '\n');
  }
  interrupt = null;
  await write(process.stdout, req.marker);
  await write(process.stderr, req.marker);
  fs.writeSync(3, JSON.stringify(result) + '\n');
  busy = false;
  pump();
}
