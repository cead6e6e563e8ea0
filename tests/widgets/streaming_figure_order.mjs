// streaming_figure.js's front end, in Node, fed the way ipywidgets feeds a widget: a
// state update is applied only after its deserialization (asynchronous, later), a custom
// message is handed over at once. Three scenarios:
//   resync: the full data (steps 0..5; the model held 0..4), the _updates count, redraw;
//   rebuild: new traces, the _updates count, then an append to the new trace;
//   slow: plotly's module loads late and the kernel does not answer at first.
// Prints one JSON line: the x values each scenario left drawn and in the model, and for
// `slow` what the model sent when.
// Usage: node streaming_figure_order.mjs PATH/TO/MODULE.js (the widget's `_esm`: hearing.js's
// text, then streaming_figure.js's)

import fs from "node:fs";

const [modulePath] = process.argv.slice(2);
const DESERIALIZE_MS = 50; // how late an update lands after the message that carries it

// --- the page: only what the module touches --------------------------------------------
const listeners = new Map();
globalThis.document = {
  body: {},
  addEventListener(type, fn) {
    if (!listeners.has(type)) listeners.set(type, new Set());
    listeners.get(type).add(fn);
  },
  removeEventListener(type, fn) {
    listeners.get(type)?.delete(fn);
  },
};
globalThis.MutationObserver = class {
  observe() {}
};
globalThis.getComputedStyle = () => ({ getPropertyValue: () => "" });
const drawn = [];
globalThis.window = {
  Plotly: {
    react(_el, data) {
      drawn.push(data.map((trace) => Array.from(trace.x)));
    },
    restyle(_el, update, traces) {
      traces.forEach((index, k) => {
        const last = drawn.length ? [...drawn[drawn.length - 1]] : [];
        last[index] = Array.from(update.x[k]);
        drawn.push(last);
      });
    },
    relayout() {},
  },
};
// plotly's own widget module (loaded from the model's _plotly_esm in a browser): its view
// says it rendered, as plotly's does
const plotlyModule = {
  default: () => ({
    initialize() {},
    render({ el }) {
      setTimeout(() => {
        for (const fn of listeners.get("plotlywidget-after-render") ?? []) {
          fn({ detail: { element: el } });
        }
      }, 0);
    },
  }),
};
let loadSlowPlotly;
globalThis.__distrainPlotlyWidget = new Map([
  ["test", Promise.resolve(plotlyModule)],
  ["slow", new Promise((resolve) => { loadSlowPlotly = () => resolve(plotlyModule); })],
]);

// --- the model, delivering messages as ipywidgets does ----------------------------------
class Model {
  constructor(state) {
    this.state = { ...state };
    this.handlers = new Map();
    this.chain = Promise.resolve();
    this.sent = [];
  }
  get(key) {
    return this.state[key];
  }
  on(name, fn) {
    if (!this.handlers.has(name)) this.handlers.set(name, []);
    this.handlers.get(name).push(fn);
  }
  off() {}
  send(msg) {
    this.sent.push(msg.type);
  }
  fire(name, ...args) {
    for (const fn of this.handlers.get(name) ?? []) fn(...args);
  }
  update(state) {
    this.chain = this.chain
      .then(() => new Promise((resolve) => setTimeout(resolve, DESERIALIZE_MS)))
      .then(() => {
        Object.assign(this.state, state);
        for (const key of Object.keys(state)) this.fire(`change:${key}`);
      });
  }
  custom(msg, buffers = []) {
    this.fire("msg:custom", msg, buffers);
  }
}

const range = (n) => Array.from({ length: n }, (_, i) => i);
const trace = (xs) => ({ type: "scatter", x: xs, y: xs.map(() => 1) });
const floats = (xs) => new Float64Array(xs).buffer;
// A trace's x as numbers, packed ({dtype, shape, value}) or a plain array.
const values = (x) => Array.from(x?.value ? new Float64Array(x.value.buffer) : x);
const settle = () => new Promise((resolve) => setTimeout(resolve, 10 * DESERIALIZE_MS));

const source = fs.readFileSync(modulePath, "utf8");
const url = `data:text/javascript;base64,${Buffer.from(source).toString("base64")}`;
const { default: factory } = await import(url);

async function shown() {
  const model = new Model({
    _plotly_version: "test",
    _widget_layout: {},
    _widget_data: [trace(range(5))],
    _updates: 1,
  });
  const widget = factory();
  await widget.initialize({ model });
  const el = { dataset: {}, classList: { add() {} }, isConnected: true };
  await widget.render({ model, el });
  await settle();
  return model;
}

const out = {};

// A page opened after the job ended: the kernel answers its "ready" with the full state.
drawn.length = 0;
let model = await shown();
model.update({ _widget_layout: {}, _widget_data: [trace(range(6))] });
model.update({ _updates: 2 });
model.custom({ type: "redraw", after: 2 });
await settle();
out.resync = { drawn: drawn[drawn.length - 1] };

// A rebuild (new traces), then an append to the new trace.
drawn.length = 0;
model = await shown();
model.update({ _widget_data: [trace([10, 11])] });
model.update({ _updates: 2 });
model.custom({ type: "append", traces: [0], keep: [2], after: 2 }, [floats([12]), floats([1])]);
await settle();
out.rebuild = {
  drawn: drawn[drawn.length - 1],
  model: values(model.get("_widget_data")[0].x),
};

// plotly's module loads late (a page short of CPU): initialize returns at once, a message
// that came before the module waits for it and is applied once it loaded, "ready" goes out
// then; a model that heard a message never says "unheard".
drawn.length = 0;
const unheardAfter = 0.05; // seconds
model = new Model({
  _plotly_version: "slow",
  _widget_layout: {},
  _widget_data: [trace(range(3))],
  _updates: 1,
  _unheard_seconds: unheardAfter,
});
let widget = factory();
const initialized = await Promise.race([
  Promise.resolve(widget.initialize({ model })).then(() => "returned"),
  settle().then(() => "waiting for plotly"),
]);
model.custom({ type: "append", traces: [0], keep: [3], after: 1 }, [floats([3]), floats([1])]);
const el = () => ({ dataset: {}, classList: { add() {} }, isConnected: true });
let rendering = widget.render({ model, el: el() });
await settle();
out.slow = { initialized, sentBeforeLoad: [...model.sent], modelBeforeLoad: values(model.get("_widget_data")[0].x) };
loadSlowPlotly();
await rendering;
await new Promise((resolve) => setTimeout(resolve, 4 * 1000 * unheardAfter));
out.slow.sent = [...model.sent];
out.slow.model = values(model.get("_widget_data")[0].x);

// No message reaches the model (anywidget dropped them): "unheard" each period after its
// "ready", until the kernel's answer arrives.
model = new Model({
  _plotly_version: "test",
  _widget_layout: {},
  _widget_data: [trace(range(3))],
  _updates: 1,
  _unheard_seconds: unheardAfter,
});
widget = factory();
await widget.initialize({ model });
await new Promise((resolve) => setTimeout(resolve, 3.5 * 1000 * unheardAfter));
out.deaf = { unanswered: [...model.sent] };
model.custom({ type: "redraw", after: 1 }); // the kernel's answer
await new Promise((resolve) => setTimeout(resolve, 4 * 1000 * unheardAfter));
out.deaf.answered = [...model.sent];

console.log(JSON.stringify(out));
