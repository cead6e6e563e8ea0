// jupyter-disttrain: the "Distributed Training" sidebar, its log viewer, status bar item
// and notifications when a job ends.

import {
  ILabShell,
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, MainAreaWidget, WidgetTracker } from '@jupyterlab/apputils';
import { IStatusBar } from '@jupyterlab/statusbar';
import { LabIcon } from '@jupyterlab/ui-components';

import { JobsAPI } from './api';
import { serveCellInserts } from './cells';
import { fit, reveal } from './layout';
import { LogViewer } from './logs';
import { JobsModel } from './model';
import { notifyJobEnds } from './notify';
import { JobsPanel } from './panel';
import { JobsStatus } from './status';
import { IJob } from './types';

const ICON_SVG = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" width="16">
<g class="jp-icon3" fill="#616161"><circle cx="5" cy="6" r="2.5"/><circle cx="19" cy="6" r="2.5"/>
<circle cx="5" cy="18" r="2.5"/><circle cx="19" cy="18" r="2.5"/><circle cx="12" cy="12" r="3"/>
<path d="M6.5 7.5l4 3M17.5 7.5l-4 3M6.5 16.5l4-3M17.5 16.5l-4-3" stroke="#616161" stroke-width="1.4"/></g></svg>`;

export const disttrainIcon = new LabIcon({ name: 'jupyter-disttrain:jobs', svgstr: ICON_SVG });

namespace CommandIDs {
  export const open = 'disttrain:open-panel';
  export const refresh = 'disttrain:refresh';
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-disttrain:plugin',
  description: 'A sidebar of distributed training jobs (jupyter_disttrain).',
  autoStart: true,
  optional: [ILabShell, ILayoutRestorer, IStatusBar, ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    labShell: ILabShell | null,
    restorer: ILayoutRestorer | null,
    statusBar: IStatusBar | null,
    palette: ICommandPalette | null
  ) => {
    const api = new JobsAPI();
    const model = new JobsModel(api);
    const logs = new WidgetTracker<MainAreaWidget<LogViewer>>({ namespace: 'disttrain-logs' });

    const showLogs = (job: IJob): void => {
      const open = logs.find(w => w.content.job.id === job.id);
      if (open) {
        app.shell.activateById(open.id);
        if (!labShell) {
          reveal(open);
        }
        return;
      }
      const viewer = new LogViewer(api, job, () => model.job(job.id)?.state ?? job.state);
      const widget = new MainAreaWidget({ content: viewer });
      widget.id = viewer.id;
      widget.title.label = viewer.title.label;
      widget.title.icon = disttrainIcon;
      widget.addClass('jp-DisttrainLogsPanel');
      void logs.add(widget);
      // Notebook 7's main area holds one document: there the logs open below it
      app.shell.add(widget, labShell ? 'main' : 'down');
      app.shell.activateById(widget.id);
      if (!labShell) {
        // below the notebook: as tall as the logs are (a few lines take a few lines)
        reveal(widget, 0.15);
        void viewer.firstLoad.then(() =>
          requestAnimationFrame(() =>
            // the widget's own chrome (its toolbar, borders) and the viewer's lines, a little slack
            fit(widget, widget.node.offsetHeight - viewer.node.clientHeight + viewer.contentHeight() + 4)
          )
        );
      }
    };

    const openNotebook = (path: string): void =>
      void app.commands.execute('docmanager:open', { path });
    const panel = new JobsPanel(model, { showLogs, openNotebook });
    panel.title.icon = disttrainIcon;
    app.shell.add(panel, 'left', { rank: 600 });
    restorer?.add(panel, 'jupyter-disttrain-panel');

    // in the View menu and the notebook toolbar (schema/plugin.json), in JupyterLab and Notebook 7
    app.commands.addCommand(CommandIDs.open, {
      label: args => (args.toolbar ? '' : 'Show Distributed Training Jobs'),
      caption: 'Show the Distributed Training jobs panel',
      icon: args => (args.toolbar || args.isPalette ? disttrainIcon : undefined),
      execute: () => app.shell.activateById(panel.id)
    });
    app.commands.addCommand(CommandIDs.refresh, {
      label: 'Refresh Distributed Training Jobs',
      execute: () => model.refresh()
    });
    palette?.addItem({ command: CommandIDs.open, category: 'Distributed Training' });
    palette?.addItem({ command: CommandIDs.refresh, category: 'Distributed Training' });

    if (statusBar) {
      const item = new JobsStatus(model, () => void app.commands.execute(CommandIDs.open));
      statusBar.registerStatusItem('jupyter-disttrain:status', {
        item,
        align: 'left',
        rank: 50
      });
    }

    const showJobs = (): void => app.shell.activateById(panel.id);
    notifyJobEnds(model, { showLogs, openNotebook, showJobs });

    serveCellInserts(app); // the checkpoint browser's resume cell, right below it

    model.setVisible(panel.isVisible);
    labShell?.layoutModified.connect(() => model.setVisible(panel.isVisible));
    model.start();
  }
};

export default plugin;
