// Which job ends to announce: kept apart from JupyterLab's notifications so it is unit-tested.

import { formatDuration, isActive } from './model';
import { IJob } from './types';

/** A job end, hang or pause to announce once: its kind picks the notification's look. */
export interface IJobEnd {
  job: IJob;
  kind: 'success' | 'error' | 'info' | 'warning';
  message: string;
  /** What happened: only an `end` is one (a hang or a pause is not, the job runs on). */
  event?: 'end' | 'hung' | 'paused';
}

/** Lab truncates longer notification messages. */
export const MAX_MESSAGE = 140;

function clip(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}

/** The notification text of a job that ended (short: Lab shows at most 140 characters). */
export function endMessage(job: IJob): IJobEnd['message'] {
  const name = `Training job ${job.name}`;
  if (job.state === 'Failed') {
    const why = job.reason || job.diagnosis || 'no reason given';
    return clip(`${name} failed: ${why}`, MAX_MESSAGE);
  }
  const took = `after ${formatDuration(job.elapsed)}`;
  const step = job.step === null ? '' : `, step ${job.step}`;
  if (job.state === 'Stopped') {
    const why = job.reason ? `: ${job.reason}` : '';
    return clip(`${name} stopped ${took}${step}${why}`, MAX_MESSAGE);
  }
  const recovered = job.recovered ? ` (${job.recovered})` : '';
  return clip(`${name} succeeded ${took}${step}${recovered}`, MAX_MESSAGE);
}

/** The notification text of a job in a detected hang. */
export function hungMessage(job: IJob): string {
  const why = job.diagnosis ? `: ${job.diagnosis}` : '';
  return clip(`Training job ${job.name} hung${why}`, MAX_MESSAGE);
}

/** The notification text of a job whose ranks stopped in the debugger. */
export function pausedMessage(job: IJob): string {
  const why = job.reason ? `: ${job.reason}` : '';
  return clip(`Training job ${job.name} paused${why}`, MAX_MESSAGE);
}

function kindOf(state: string): IJobEnd['kind'] {
  return state === 'Failed' ? 'error' : state === 'Succeeded' ? 'success' : 'info';
}

/**
 * Job ends this page should announce, each once.
 *
 * A job is announced when a listing shows it ended and it was either seen
 * active by an earlier listing of this page, or created after the page's
 * first listing (a job that ended between two polls). Jobs that had ended
 * before the first listing are history, not news. A job is known by its id
 * and creation time, so a new job under an old name is announced again.
 */
export class JobEndWatcher {
  private since: number | null = null;
  private readonly active = new Set<string>();
  private readonly announced = new Set<string>();
  private readonly hung = new Set<string>();
  private readonly paused = new Set<string>();

  /** Feed one listing (`now`: the server's clock); the ends to announce now. */
  update(jobs: IJob[], now: number): IJobEnd[] {
    const first = this.since === null;
    if (first) {
      this.since = now;
    }
    const ends: IJobEnd[] = [];
    for (const job of jobs) {
      const key = `${job.id}@${job.created}`;
      if (job.state === 'Hung') {
        if (!this.hung.has(key)) {
          this.hung.add(key); // one notice per hang; the ranks moving again clears it
          ends.push({ job, kind: 'warning', message: hungMessage(job), event: 'hung' });
        }
      } else {
        this.hung.delete(key);
      }
      if (job.state === 'Paused') {
        if (!this.paused.has(key)) {
          this.paused.add(key); // one notice per pause; running on clears it
          ends.push({ job, kind: 'info', message: pausedMessage(job), event: 'paused' });
        }
      } else {
        this.paused.delete(key);
      }
      if (isActive(job)) {
        this.active.add(key);
        this.announced.delete(key); // ends again later: news again
        continue;
      }
      if (this.announced.has(key)) {
        continue;
      }
      const seen = this.active.delete(key);
      const fresh = !first && job.created >= (this.since ?? now);
      if (seen || fresh) {
        ends.push({ job, kind: kindOf(job.state), message: endMessage(job), event: 'end' });
      }
      this.announced.add(key);
    }
    return ends;
  }
}

/** Quiet ends (a success, a stop) that come within this long of the last one join its notice. */
export const GROUP_MS = 15000;

/** One notice that several quiet job ends share (a Run All of several cells). */
export interface IEndGroup {
  ends: IJobEnd[];
  /** When the last end joined (ms, the page's clock). */
  at: number;
}

/**
 * Whether `end` is quiet: a success or a stop. A failure, a hang or a pause keeps its own
 * notice (a pause is not an end: counting it as one would count its job twice).
 */
export function isQuiet(end: IJobEnd): boolean {
  const ended = (end.event ?? 'end') === 'end';
  return ended && (end.kind === 'success' || end.kind === 'info');
}

/** One run of a job: a new job under an old name is another run. */
export function runKey(job: IJob): string {
  return `${job.id}@${job.created}`;
}

/**
 * The hang notices to take down: those of runs (keys of `notices`, see {@link runKey}) that
 * the listing `jobs` no longer shows Hung (stopped, ended, running again, or gone).
 */
export function overHangs(notices: ReadonlyMap<string, string>, jobs: IJob[]): string[] {
  const hung = new Set(jobs.filter(j => j.state === 'Hung').map(runKey));
  return [...notices.keys()].filter(key => !hung.has(key));
}

/**
 * The group `end` belongs to at `now`: `group` with `end` added when both are quiet and
 * the group's last end was at most {@link GROUP_MS} ago, else null (`end` gets its own).
 */
export function joinGroup(group: IEndGroup | null, end: IJobEnd, now: number): IEndGroup | null {
  if (!group || !isQuiet(end) || !group.ends.every(isQuiet) || now - group.at > GROUP_MS) {
    return null;
  }
  const others = group.ends.filter(e => runKey(e.job) !== runKey(end.job)); // a job is counted once
  return { ends: [...others, end], at: now };
}

/** The text of a shared notice: how many ended and each job's name with its end. */
export function groupMessage(ends: IJobEnd[]): string {
  if (ends.length === 1) {
    return ends[0].message;
  }
  const each = ends.map(e => `${e.job.name} ${e.job.state.toLowerCase()}`);
  return clip(`${ends.length} training jobs ended: ${each.join(', ')}`, MAX_MESSAGE);
}

/** The look of a shared notice: success when every job succeeded, else info. */
export function groupKind(ends: IJobEnd[]): IJobEnd['kind'] {
  return ends.every(e => e.kind === 'success') ? 'success' : 'info';
}
