// Front end of jupyter_disttrain's StreamingFigure: plotly's own FigureWidget
// front end (its module travels in the _plotly_esm trait) plus two messages
// from the kernel:
//   {type: "append", traces: [i...], keep: [k...]} with two float64 buffers
//       (x, y) per trace: each trace keeps its first k points and gets the new
//       ones, in the model (for views made later) and in every view;
//   {type: "redraw"}: every view redraws from the model's data and layout.
// Once plotly's module is set up it sends {type: "ready"}; the kernel answers
// with its full state, so nothing sent before this module listened is lost. An
// append naming a trace the model does not hold (traces plotly added while its
// module loaded) asks for the full state again. A view waits for the model's
// set-up before it renders.
// ipywidgets applies a state update once it is deserialized (later) but hands
// a custom message over at once: each message names the count of the synced
// `_updates` it follows ("after"), and waits here until the model got there
// (an append to traces a rebuild is still bringing, a redraw before the resync's
// data). Each view's element carries data-distrain-appends and
// data-distrain-appended-points: what arrived as appends so far, and
// data-distrain-held the messages waiting for their state update (for tests).
// anywidget drops every message to a model whose initialize took longer than
// its budget (2 s in anywidget 0.9.14 to 0.11: a page short of CPU loading
// plotly's 5 MB module): initialize therefore returns at once and plotly's
// module loads behind it, and a model that heard nothing at all
// `_unheard_seconds` after its "ready" says {type: "unheard"} (again each
// period, at most UNHEARD_ASKS times) so the kernel opens a new one: hearing.js,
// whose text comes first in this widget's module (streaming_figure.py).

const loaded = (globalThis.__distrainPlotlyWidget ??= new Map());

function plotlyWidget(model) {
  const key = model.get("_plotly_version");
  if (!loaded.has(key)) {
    const source = new Blob([model.get("_plotly_esm")], { type: "text/javascript" });
    const url = URL.createObjectURL(source);
    loaded.set(
      key,
      import(/* webpackIgnore: true */ url).finally(() => URL.revokeObjectURL(url)),
    );
  }
  return loaded.get(key);
}

const TYPES = {
  float64: Float64Array,
  float32: Float32Array,
  int8: Int8Array,
  int16: Int16Array,
  int32: Int32Array,
  uint8: Uint8Array,
  uint16: Uint16Array,
  uint32: Uint32Array,
};

function isPacked(value) {
  return (
    value !== null &&
    typeof value === "object" &&
    "dtype" in value &&
    "shape" in value &&
    ("value" in value || "buffer" in value)
  );
}

function copyBytes(view) {
  if (view instanceof ArrayBuffer) return view.slice(0);
  return view.buffer.slice(view.byteOffset, view.byteOffset + view.byteLength);
}

// A packed array ({dtype, shape, value}) as a typed array of its own.
function unpack(value) {
  return new TYPES[value.dtype](copyBytes(value.value ?? value.buffer));
}

// The packed form plotly's serializers use; `array` must own its whole buffer.
function pack(array) {
  return { dtype: "float64", shape: [array.length], value: new DataView(array.buffer) };
}

// Model state (packed arrays inside) as plain plotly data.
function decode(value) {
  if (Array.isArray(value)) return value.map(decode);
  if (isPacked(value)) return unpack(value);
  if (ArrayBuffer.isView(value)) return value;
  if (value !== null && typeof value === "object") {
    const out = {};
    for (const [key, item] of Object.entries(value)) out[key] = decode(item);
    return out;
  }
  return value === "_undefined_" ? undefined : value;
}

function asFloat64(value) {
  if (value === undefined || value === null) return new Float64Array(0);
  const array = isPacked(value) ? unpack(value) : value;
  if (array instanceof Float64Array) return array;
  return Float64Array.from(array, (item) => (item === null ? NaN : Number(item)));
}

function spliced(old, keep, extra) {
  const kept = Math.min(keep, old.length);
  const out = new Float64Array(kept + extra.length);
  out.set(old.subarray(0, kept));
  out.set(extra, kept);
  return out;
}

export default () => {
  let inner = null;
  let resolveSetUp;
  const setUp = new Promise((resolve) => { resolveSetUp = resolve; });
  let plotlyReady = false; // plotly's module loaded and its model set up
  // a custom message arrived: the kernel's messages reach this model (the kernel answers
  // every "ready" with one; anywidget may drop them all)
  let heard = false;
  const views = new Set();
  const received = { appends: 0, points: 0 };
  let resyncAsked = false; // a "ready" sent for a missing trace, not yet answered

  function mark(el) {
    el.dataset.distrainAppends = String(received.appends);
    el.dataset.distrainAppendedPoints = String(received.points);
    el.dataset.distrainHeld = String(held.length);
  }

  // The page's theme (JupyterLab's CSS variables): text and grid follow it, the
  // background stays transparent, so light, dark and high-contrast themes all read.
  function themeOf(el) {
    const css = getComputedStyle(el);
    const ink = css.getPropertyValue("--jp-ui-font-color1").trim();
    const grid = css.getPropertyValue("--jp-border-color2").trim();
    return ink ? { ink, grid: grid || "rgba(128,128,128,0.3)" } : null;
  }

  function themed(layout, el) {
    const theme = themeOf(el);
    if (!theme) return layout;
    const axis = (a) => ({ ...(a || {}), color: theme.ink, gridcolor: theme.grid });
    return {
      ...layout,
      paper_bgcolor: "rgba(0,0,0,0)",
      plot_bgcolor: "rgba(0,0,0,0)",
      font: { ...(layout.font || {}), color: theme.ink },
      xaxis: axis(layout.xaxis),
      yaxis: axis(layout.yaxis),
    };
  }

  // Re-colour a drawn plot in the page's theme (after the first render, on a theme change).
  // A plot drawn before its output joined the page (a display updated at a job's end) has
  // no theme to read yet: it is coloured once it is in the page.
  function applyTheme(el, tries = 40) {
    const theme = themeOf(el);
    if (!theme && tries > 0 && !el.isConnected) {
      setTimeout(() => applyTheme(el, tries - 1), 100);
      return;
    }
    if (!theme || !el.layout) return;
    window.Plotly.relayout(el, {
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
      "font.color": theme.ink, "xaxis.color": theme.ink, "yaxis.color": theme.ink,
      "xaxis.gridcolor": theme.grid, "yaxis.gridcolor": theme.grid,
      _doNotReportToPy: true,
    });
    const means = (el.data || []).map((t, i) => (t.name === "mean" ? i : -1)).filter((i) => i >= 0);
    if (means.length) {  // the mean's line is drawn in the theme's ink
      window.Plotly.restyle(el, { "line.color": theme.ink, _doNotReportToPy: true }, means);
    }
  }

  new MutationObserver(() => {
    for (const view of views) if (view.ready) applyTheme(view.el);
  }).observe(document.body, { attributes: true, attributeFilter: ["data-jp-theme-name"] });

  function redraw(model, view) {
    const layout = decode(model.get("_widget_layout")) ?? {};
    if (!layout.height) layout.height = 360;
    window.Plotly.react(view.el, decode(model.get("_widget_data")), themed(layout, view.el));
    applyTheme(view.el);
  }

  function append(model, msg, buffers) {
    const data = model.get("_widget_data");
    const traces = [];
    const xs = [];
    const ys = [];
    msg.traces.forEach((index, k) => {
      const trace = data[index];
      if (!trace) { // the model missed the trace: the kernel's full state brings it
        if (!resyncAsked) {
          resyncAsked = true;
          model.send({ type: "ready" });
        }
        return;
      }
      const x = spliced(asFloat64(trace.x), msg.keep[k], new Float64Array(copyBytes(buffers[2 * k])));
      const y = spliced(asFloat64(trace.y), msg.keep[k], new Float64Array(copyBytes(buffers[2 * k + 1])));
      trace.x = pack(x);
      trace.y = pack(y);
      traces.push(index);
      xs.push(x);
      ys.push(y);
    });
    if (traces.length === 0) return;
    received.appends += 1;
    received.points += msg.traces.reduce((n, _, k) => n + buffers[2 * k].byteLength / 8, 0);
    for (const view of views) {
      mark(view.el);
      if (!view.ready) {
        view.stale = true;
        continue;
      }
      const update = { x: xs, y: ys, _doNotReportToPy: true };
      window.Plotly.restyle(view.el, update, traces);
    }
    // drawn: the kernel sends the next appends at this page's pace (see streaming_figure.py)
    if (Number.isInteger(msg.seq)) model.send({ type: "drawn", seq: msg.seq });
  }

  // Messages waiting for the state update they follow, in arrival order.
  const held = [];

  function onMessage(model, msg, buffers) {
    heard = true;
    if (!plotlyReady || held.length > 0 || (msg?.after ?? 0) > model.get("_updates")) {
      held.push([msg, buffers]);
      for (const view of views) mark(view.el);
      return;
    }
    handle(model, msg, buffers);
  }

  function release(model) {
    if (!plotlyReady) return;
    while (held.length > 0 && (held[0][0]?.after ?? 0) <= model.get("_updates")) {
      const [msg, buffers] = held.shift();
      handle(model, msg, buffers);
    }
    for (const view of views) mark(view.el);
  }

  function handle(model, msg, buffers) {
    if (msg?.type === "append") {
      append(model, msg, buffers ?? []);
    } else if (msg?.type === "redraw") {
      resyncAsked = false;
      for (const view of views) {
        if (view.ready) redraw(model, view);
        else view.stale = true;
      }
    }
  }

  return {
    initialize({ model }) {
      model.on("msg:custom", (msg, buffers) => onMessage(model, msg, buffers));
      model.on("change:_updates", () => release(model));
      // not awaited: anywidget gives initialize a budget a page short of CPU can overrun
      plotlyWidget(model).then((module) => {
        inner = module.default();
        inner.initialize({ model });
        plotlyReady = true;
        resolveSetUp();
        release(model);
        listenForKernel(model, () => heard); // hearing.js, which this module follows
      });
    },
    async render({ model, el }) {
      await setUp; // plotly's module loads in initialize: its views need it
      const view = { el, ready: false, stale: false };
      const rendered = (event) => {
        if (event.detail?.element !== el) return;
        document.removeEventListener("plotlywidget-after-render", rendered);
        view.ready = true;
        applyTheme(el);
        // a view made later (a refreshed display, another page on the same kernel) asks for
        // the whole state: the model may only know what its first views were sent
        model.send({ type: "ready" });
        if (view.stale) {
          view.stale = false;
          redraw(model, view);
        }
      };
      document.addEventListener("plotlywidget-after-render", rendered);
      views.add(view);
      el.classList.add("distrain-plot");
      mark(el);
      const dispose = inner.render({ model, el });
      return () => {
        views.delete(view);
        document.removeEventListener("plotlywidget-after-render", rendered);
        if (typeof dispose === "function") dispose();
      };
    },
  };
};
