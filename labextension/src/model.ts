// The sidebar's state, kept apart from the DOM so it is unit-tested without JupyterLab.
//
// Polling, not a server-sent stream: a listing is a few hundred bytes, the
// server answers it from monitors it already keeps up to date, and a plain
// request survives server restarts, proxies that buffer streams (JupyterHub,
// Binder) and a laptop waking from sleep without reconnection logic. The
// interval is short while the panel is visible, and slow when only the
// status bar needs the running count.

import { IJob, IJobsAPI, IBackendStatus, INamespaceJob, IPhase, IProgress, IRank, JSONFloat, TERMINAL_STATES } from './types';

/** Poll intervals in milliseconds. */
export const FAST_MS = 1500;
export const IDLE_MS = 5000;
export const HIDDEN_MS = 10000;

/** How long to wait before the next poll (a visible panel shows new jobs at once). */
export function pollInterval(visible: boolean, running: number): number {
  if (visible) {
    return FAST_MS;
  }
  return running > 0 ? IDLE_MS : HIDDEN_MS;
}

/** "0s", "42s", "3m 04s", "2h 05m". */
export function formatDuration(seconds: number): string {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) {
    return `${s}s`;
  }
  if (s < 3600) {
    return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, '0')}s`;
  }
  return `${Math.floor(s / 3600)}h ${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

/** A metric value in four significant digits ("NaN" etc. kept as sent). */
export function formatValue(value: JSONFloat): string {
  if (typeof value === 'string') {
    return value;
  }
  if (Number.isInteger(value)) {
    return String(value);
  }
  const abs = Math.abs(value);
  return abs !== 0 && (abs < 1e-3 || abs >= 1e5) ? value.toExponential(3) : value.toPrecision(4);
}

/** "1.2 MB" etc.; "" when unknown. */
export function formatBytes(bytes: number | null): string {
  if (bytes === null) {
    return '';
  }
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit += 1;
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(1)} ${units[unit]}`;
}

/** The step column: "-" before any report. */
export function formatStep(step: number | null): string {
  return step === null ? '-' : String(step);
}

/** The status bar's text for `running` jobs, `hung` of them in a detected hang. */
export function statusText(running: number, hung = 0): string {
  const text = running === 1 ? '1 training job running' : `${running} training jobs running`;
  return hung > 0 ? `${text}, ${hung} hung` : text;
}

/** True while a job may still change. */
export function isActive(job: { state: string }): boolean {
  return !TERMINAL_STATES.has(job.state);
}

/** A finite number, or null (absent, null, NaN or infinite). */
function finite(value: number | null | undefined): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

/** What a progress bar shows; null when the job sent no progress. */
export interface IProgressView {
  /** 0..100, null when the total is unknown (no bar, only the step). */
  percent: number | null;
  /** "39/100" or "39" */
  text: string;
  /** "12s left", "" when unknown or done. */
  eta: string;
  /** "2.5 steps/s", "" when unknown. */
  rate: string;
}

/** The bar, its text and ETA from a job's optional `progress`. */
export function progressView(progress: IProgress | null | undefined): IProgressView | null {
  if (!progress) {
    return null;
  }
  const step = finite(progress.step);
  const total = finite(progress.total);
  let fraction = finite(progress.fraction);
  if (fraction === null && step !== null && total !== null && total > 0) {
    fraction = step / total;
  }
  if (step === null && fraction === null) {
    return null;
  }
  const percent = fraction === null ? null : Math.round(Math.min(1, Math.max(0, fraction)) * 100);
  const text = step === null ? `${percent}%` : total === null ? String(step) : `${step}/${total}`;
  const eta = finite(progress.eta_s);
  const rate = finite(progress.rate_per_s);
  return {
    percent,
    text,
    eta: eta === null || percent === 100 ? '' : `${formatDuration(eta)} left`,
    rate: rate === null ? '' : `${formatRate(rate)} steps/s`
  };
}

/** A rate in three significant digits ("2.50", "120", "0.0312"). */
export function formatRate(rate: number): string {
  return rate >= 100 ? String(Math.round(rate)) : rate.toPrecision(3);
}

/** The phase a job is in (its label and how long so far), "" when none or ended. */
export function phaseText(job: Pick<IJob, 'state' | 'phase' | 'phases'>): string {
  if (!job.phase || !isActive(job)) {
    return '';
  }
  const phase = (job.phases ?? []).find(p => p.name === job.phase);
  const label = phase?.label || job.phase;
  const seconds = finite(phase?.duration_s);
  return seconds === null ? label : `${label} (${formatDuration(seconds)})`;
}

/** How long the job took from submit to its first report(): "after 14s", "" before it. */
export function firstStepText(job: Pick<IJob, 'first_step_s'>): string {
  const seconds = finite(job.first_step_s);
  return seconds === null ? '' : `after ${formatDuration(seconds)}`;
}

/**
 * A phase's state as drawn: "unfinished" for the phase a job ended in (listed "active" with an
 * end), else the listed "done", "active" or "pending".
 */
export function phaseState(phase: IPhase): string {
  return phase.state === 'active' && phase.ended !== null ? 'unfinished' : phase.state;
}

/**
 * One line of the phase timeline: "rendezvous 3s", "first step 4s (not finished)" for the
 * phase a job ended in (pending phases: label only).
 */
export function phaseLine(phase: IPhase): string {
  const seconds = finite(phase.duration_s);
  const label = phase.label || phase.name;
  if (seconds === null || phase.state === 'pending') {
    return label;
  }
  const unfinished = phaseState(phase) === 'unfinished' ? ' (not finished)' : '';
  return `${label} ${formatDuration(seconds)}${unfinished}`;
}

/** A rank's resource figures ("CPU 95%, memory 1.2 GB of 4.0 GB, GPU 80%"); absent ones left out. */
export function usageText(rank: Pick<IRank, 'cpu_pct' | 'rss_bytes' | 'mem_limit_bytes' | 'gpu_util_pct' | 'gpu_mem_bytes'>): string {
  const parts: string[] = [];
  const cpu = finite(rank.cpu_pct);
  if (cpu !== null) {
    parts.push(`CPU ${Math.round(cpu)}%`);
  }
  const rss = finite(rank.rss_bytes);
  if (rss !== null) {
    const limit = finite(rank.mem_limit_bytes);
    parts.push(`memory ${formatBytes(rss)}${limit === null ? '' : ` of ${formatBytes(limit)}`}`);
  }
  const gpu = finite(rank.gpu_util_pct);
  if (gpu !== null) {
    parts.push(`GPU ${Math.round(gpu)}%`);
  }
  const gpuMem = finite(rank.gpu_mem_bytes);
  if (gpuMem !== null) {
    parts.push(`GPU memory ${formatBytes(gpuMem)}`);
  }
  return parts.join(', ');
}

/** A log request: one rank or all (null), the last `tail` lines. */
export interface ILogQuery {
  rank: number | null;
  tail: number;
}

type Listener = () => void;

/**
 * Jobs of every backend, the expanded rows' details, and polling.
 *
 * `refresh()` does one poll (the listing, then the detail of each expanded
 * job); `start()` keeps polling at `pollInterval`. Listeners are called after
 * every change. Errors are kept in `error` (the last listing failure) and
 * never thrown from polling.
 */
export class JobsModel {
  jobs: IJob[] = [];
  backends: IBackendStatus[] = [];
  running = 0;
  /** The server's clock at the last listing (seconds). */
  now = 0;
  error = '';
  loaded = false;
  readonly expanded = new Set<string>();
  readonly details = new Map<string, IJob>();
  readonly showCheckpoints = new Set<string>();
  /**
   * Per job: the message of its last action (stop), shown in its row while the run it was
   * made for lasts (a new run of the name, or the run's end, which says its own reason, drops it).
   */
  readonly notes = new Map<string, string>();
  /** Per noted job: the `created` time of the run the note was made for. */
  private readonly noteRuns = new Map<string, number>();
  /** The namespace section: shown (then polled with the listing), its rows, its error. */
  showNamespace = false;
  namespaceJobs: INamespaceJob[] = [];
  namespaceError = '';

  constructor(
    readonly api: IJobsAPI,
    private readonly timers: {
      set(fn: () => void, ms: number): unknown;
      clear(handle: unknown): void;
    } = {
      set: (fn, ms) => setTimeout(fn, ms),
      clear: handle => clearTimeout(handle as ReturnType<typeof setTimeout>)
    }
  ) {}

  private listeners = new Set<Listener>();
  private timer: unknown = null;
  private polling = false;
  private visible = false;
  private inflight: Promise<void> | null = null;

  /** Call `fn` after every change; returns a function that removes it. */
  subscribe(fn: Listener): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  job(id: string): IJob | undefined {
    return this.details.get(id) ?? this.jobs.find(j => j.id === id);
  }

  /** One poll; concurrent calls share the request in flight. */
  refresh(): Promise<void> {
    if (this.inflight === null) {
      this.inflight = this.poll().finally(() => {
        this.inflight = null;
      });
    }
    return this.inflight;
  }

  private async poll(): Promise<void> {
    try {
      const listing = await this.api.list();
      this.jobs = listing.jobs;
      this.backends = listing.backends;
      this.running = listing.running;
      this.now = listing.now;
      this.error = '';
      this.loaded = true;
      this.dropStaleNotes();
    } catch (err) {
      this.error = `cannot list jobs: ${(err as Error).message ?? err}`;
      this.emit();
      return;
    }
    await this.pollNamespace();
    // A row stays open while its job is not listed: a new run of the name replaces the
    // old run's record between two polls, and the user's open row is for the name. Only
    // listed jobs' details are kept and read.
    const ids = new Set([...this.jobs.map(j => j.id), ...this.namespaceJobs.map(j => j.id)]);
    for (const id of [...this.details.keys()]) {
      if (!this.expanded.has(id) || !ids.has(id)) {
        this.details.delete(id);
      }
    }
    await Promise.all([...this.expanded].filter(id => ids.has(id)).map(id => this.loadDetail(id)));
    this.emit();
  }

  /** Drop the notes of runs that ended or were replaced by a new run of their name. */
  private dropStaleNotes(): void {
    for (const id of [...this.notes.keys()]) {
      const listed = this.jobs.find(j => j.id === id);
      const run = this.noteRuns.get(id);
      if (listed && (TERMINAL_STATES.has(listed.state) || (run !== undefined && listed.created !== run))) {
        this.notes.delete(id);
        this.noteRuns.delete(id);
      }
    }
  }

  /** The namespace's jobs, when the section is shown (one request: the server watches). */
  private async pollNamespace(): Promise<void> {
    if (!this.showNamespace || !this.api.namespace) {
      return;
    }
    try {
      this.namespaceJobs = (await this.api.namespace()).jobs;
      this.namespaceError = '';
    } catch (err) {
      this.namespaceError = `cannot list the namespace: ${(err as Error).message ?? err}`;
    }
  }

  /** Show or hide the namespace section (showing lists it at once). */
  async toggleNamespace(): Promise<void> {
    this.showNamespace = !this.showNamespace;
    this.emit();
    if (this.showNamespace) {
      await this.pollNamespace();
      this.emit();
    }
  }

  private async loadDetail(id: string): Promise<void> {
    try {
      this.details.set(id, await this.api.job(id));
    } catch (err) {
      this.notes.set(id, `cannot read the job: ${(err as Error).message ?? err}`);
    }
  }

  /** Expand or collapse a row (expanding reads its detail at once). */
  async toggle(id: string): Promise<void> {
    if (this.expanded.has(id)) {
      this.expanded.delete(id);
      this.details.delete(id);
      this.emit();
      return;
    }
    this.expanded.add(id);
    this.emit();
    await this.loadDetail(id);
    this.emit();
  }

  /** Show or hide a job's checkpoint list. */
  toggleCheckpoints(id: string): void {
    if (!this.showCheckpoints.delete(id)) {
      this.showCheckpoints.add(id);
    }
    this.emit();
  }

  /** Ask the server to stop a job; the row shows what happened. */
  async stopJob(id: string): Promise<void> {
    this.notes.set(id, 'stopping...');
    const run = this.job(id)?.created;
    if (run !== undefined) {
      this.noteRuns.set(id, run);
    }
    this.emit();
    try {
      const result = await this.api.stop(id);
      this.notes.set(id, result.stopped ? 'stop requested' : 'was not running');
      this.jobs = this.jobs.map(j => (j.id === id ? { ...result.job, detail: null } : j));
    } catch (err) {
      this.notes.set(id, `stop failed: ${(err as Error).message ?? err}`);
    }
    this.emit();
    await this.refresh();
  }

  /** Keep polling (faster while `visible`); `stopPolling` ends it. */
  start(): void {
    if (this.polling) {
      return;
    }
    this.polling = true;
    void this.tick();
  }

  stopPolling(): void {
    this.polling = false;
    if (this.timer !== null) {
      this.timers.clear(this.timer);
      this.timer = null;
    }
  }

  /** The panel became visible or hidden: poll at once when it shows. */
  setVisible(visible: boolean): void {
    const wasHidden = !this.visible;
    this.visible = visible;
    if (visible && wasHidden && this.polling) {
      if (this.timer !== null) {
        this.timers.clear(this.timer);
        this.timer = null;
      }
      void this.tick();
    }
  }

  private async tick(): Promise<void> {
    await this.refresh();
    if (!this.polling || this.timer !== null) {
      return;
    }
    this.timer = this.timers.set(() => {
      this.timer = null;
      void this.tick();
    }, pollInterval(this.visible, this.running));
  }

  private emit(): void {
    for (const fn of [...this.listeners]) {
      try {
        fn();
      } catch (err) {
        console.error('disttrain: listener failed', err);
      }
    }
  }
}
