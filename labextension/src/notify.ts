// Job ends as JupyterLab notifications (Lab's notification API), with buttons to the
// job's notebook and logs. Which ends to announce is decided by JobEndWatcher (ends.ts).

import { Notification } from '@jupyterlab/apputils';

import {
  IEndGroup,
  IJobEnd,
  JobEndWatcher,
  groupKind,
  groupMessage,
  isQuiet,
  joinGroup,
  overHangs,
  runKey
} from './ends';
import { JobsModel } from './model';
import { IJob } from './types';

/** Success and stop notices hide after this long (they stay in the notification center). */
export const NOTICE_MS = 15000;

export interface INotifyActions {
  showLogs(job: IJob): void;
  openNotebook(path: string): void;
  /** Show the jobs panel (a notice that several jobs share). */
  showJobs(): void;
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

/** Update the shared notice `id` to say every end of `group`; false when it was dismissed. */
function announceGroup(id: string, group: IEndGroup, actions: INotifyActions): boolean {
  return Notification.update({
    id,
    message: groupMessage(group.ends),
    type: groupKind(group.ends),
    autoClose: NOTICE_MS,
    actions: [
      {
        label: 'Show jobs',
        caption: 'The Distributed Training jobs panel',
        displayType: 'accent',
        callback: () => actions.showJobs()
      }
    ]
  });
}

/**
 * Announce each job end the model's listings show, once; returns a function that stops it.
 *
 * Quiet ends that follow each other (several cells of one Run All) share one notice that
 * names each job; a failure or a hang always has a notice of its own. A hang's notice (kept
 * until dismissed) is taken down once a listing no longer shows its job Hung.
 */
export function notifyJobEnds(model: JobsModel, actions: INotifyActions): () => void {
  const watcher = new JobEndWatcher();
  let listed: IJob[] | null = null;
  let shared: { id: string; group: IEndGroup } | null = null;
  const hangs = new Map<string, string>(); // run -> its hang notice
  return model.subscribe(() => {
    if (!model.loaded || model.jobs === listed) {
      return; // no new listing (an expanded row or a failed poll)
    }
    listed = model.jobs;
    for (const key of overHangs(hangs, model.jobs)) {
      Notification.dismiss(hangs.get(key));
      hangs.delete(key);
    }
    for (const end of watcher.update(model.jobs, model.now)) {
      const now = Date.now();
      const joined = joinGroup(shared?.group ?? null, end, now);
      if (shared && joined && announceGroup(shared.id, joined, actions)) {
        shared = { id: shared.id, group: joined };
        continue;
      }
      const id = announce(end, actions);
      if (end.event === 'hung') {
        hangs.set(runKey(end.job), id);
      }
      shared = isQuiet(end) ? { id, group: { ends: [end], at: now } } : shared;
    }
  });
}
