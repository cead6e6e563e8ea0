// Job ends as JupyterLab notifications (Lab's notification API), with buttons to the
// job's notebook and logs. Which ends to announce is decided by JobEndWatcher (ends.ts).

import { Notification } from '@jupyterlab/apputils';

import { IJobEnd, JobEndWatcher } from './ends';
import { JobsModel } from './model';
import { IJob } from './types';

/** Success and stop notices hide after this long (they stay in the notification center). */
export const NOTICE_MS = 15000;

export interface INotifyActions {
  showLogs(job: IJob): void;
  openNotebook(path: string): void;
}

/** Show one job end: an error (kept until dismissed) for a failure, else a short-lived notice. */
export function announce(end: IJobEnd, actions: INotifyActions): string {
  const job = end.job;
  const buttons: Notification.IAction[] = [];
  const notebook = job.notebook;
  if (notebook) {
    buttons.push({
      label: 'Open notebook',
      caption: `Open ${notebook}`,
      displayType: 'accent',
      callback: () => actions.openNotebook(notebook)
    });
  }
  buttons.push({
    label: 'Show logs',
    caption: `The output of every rank of ${job.name}`,
    displayType: end.kind === 'error' ? 'warn' : 'default',
    callback: () => actions.showLogs(job)
  });
  return Notification.emit(end.message, end.kind, {
    autoClose: end.kind === 'error' || end.kind === 'warning' ? false : NOTICE_MS,
    actions: buttons,
    data: { disttrainJob: job.id, state: job.state }
  });
}

/** Announce each job end the model's listings show, once; returns a function that stops it. */
export function notifyJobEnds(model: JobsModel, actions: INotifyActions): () => void {
  const watcher = new JobEndWatcher();
  let listed: IJob[] | null = null;
  return model.subscribe(() => {
    if (!model.loaded || model.jobs === listed) {
      return; // no new listing (an expanded row or a failed poll)
    }
    listed = model.jobs;
    for (const end of watcher.update(model.jobs, model.now)) {
      announce(end, actions);
    }
  });
}
