// A model's listening for its kernel (widgets/reopen.py). The text of this file
// starts the module of each widget that reopens its comm: anywidget drops every
// message to a model whose initialize overran its budget, and such a model
// hears nothing from the kernel for its whole life. listenForKernel(model,
// heard) says {type: "ready"}, then {type: "unheard"} every `_unheard_seconds`
// until heard() is true, the model is destroyed (the kernel closed its comm
// and opened a new one) or UNHEARD_ASKS asks were made.

const UNHEARD_ASKS = 10;

function listenForKernel(model, heard) {
  model.send({ type: "ready" });
  const period = 1000 * model.get("_unheard_seconds");
  let asked = 0;
  let closed = false;
  model.on("destroy", () => { closed = true; });
  const check = () => {
    if (heard() || closed || asked >= UNHEARD_ASKS) return;
    asked += 1;
    model.send({ type: "unheard" });
    setTimeout(check, period);
  };
  setTimeout(check, period);
}
