// Cells the kernel asks to insert: the checkpoint browser's "Resume a job from here" opens a
// comm to the target `jupyter_disttrain.cells` with {anchor, source}; the notebook whose cell
// shows the element of class `distrain-ckpt-<anchor>` gets a code cell with `source` right
// below that cell, selected (command mode). The reply says whether it was inserted, so a
// kernel without this extension in its front end falls back to IPython's next input.

import type { JupyterFrontEnd } from '@jupyterlab/application';
import type { Kernel, KernelMessage } from '@jupyterlab/services';
import type { ISignal } from '@lumino/signaling';
import type { Widget } from '@lumino/widgets';

export const CELLS_TARGET = 'jupyter_disttrain.cells';

/** What this module needs of a notebook panel (JupyterLab 4 and Notebook 7 alike). */
interface INotebookLike {
  widgets: readonly Widget[];
  activeCellIndex: number;
  mode: 'command' | 'edit';
  model: { sharedModel: { insertCell(index: number, cell: { cell_type: 'code'; source: string }): unknown } } | null;
}
interface IPanelLike extends Widget {
  content: INotebookLike;
  sessionContext: {
    session: { kernel: Kernel.IKernelConnection | null } | null;
    kernelChanged: ISignal<unknown, unknown>;
  };
}

const isPanel = (w: Widget): w is IPanelLike => {
  const p = w as unknown as { sessionContext?: unknown; content?: { widgets?: unknown } };
  return Boolean(p.sessionContext) && p.content?.widgets !== undefined;
};

/** Insert `source` below the cell of `panel` that shows `anchor`: whether it was there. */
export function insertBelow(panel: IPanelLike, anchor: string, source: string): boolean {
  const notebook = panel.content;
  const selector = `.distrain-ckpt-${CSS.escape(anchor)}`;
  const index = Array.from(notebook.widgets).findIndex(cell => cell.node.querySelector(selector) !== null);
  if (index < 0 || !notebook.model) {
    return false;
  }
  notebook.model.sharedModel.insertCell(index + 1, { cell_type: 'code', source });
  notebook.activeCellIndex = index + 1;
  notebook.mode = 'command';
  return true;
}

function listen(panel: IPanelLike, kernel: Kernel.IKernelConnection, seen: WeakSet<object>): void {
  if (seen.has(kernel)) {
    return;
  }
  seen.add(kernel);
  kernel.registerCommTarget(CELLS_TARGET, (comm: Kernel.IComm, msg: KernelMessage.ICommOpenMsg) => {
    const data = msg.content.data as { anchor?: unknown; source?: unknown };
    let ok = false;
    try {
      ok =
        typeof data.anchor === 'string' &&
        typeof data.source === 'string' &&
        insertBelow(panel, data.anchor, data.source);
    } catch (error) {
      console.error('jupyter-disttrain: cannot insert the cell', error);
    }
    comm.send({ inserted: ok });
    comm.close();
  });
}

/** Every notebook panel's kernel (now and later) answers the kernel's insert requests. */
export function serveCellInserts(app: JupyterFrontEnd): void {
  const panels = new WeakSet<object>();
  const kernels = new WeakSet<object>();
  const hook = (): void => {
    for (const widget of app.shell.widgets('main')) {
      if (!isPanel(widget) || panels.has(widget)) {
        continue;
      }
      panels.add(widget);
      const connect = (): void => {
        const kernel = widget.sessionContext.session?.kernel;
        if (kernel) {
          listen(widget, kernel, kernels);
        }
      };
      widget.sessionContext.kernelChanged.connect(connect);
      connect();
    }
  };
  void app.restored.then(hook);
  app.shell.currentChanged?.connect(hook);
  app.serviceManager.sessions.runningChanged.connect(hook); // a notebook's kernel started
}
