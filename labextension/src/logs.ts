// A main-area log viewer for one job: a rank filter, a line count, live while the job runs.

import { Widget } from '@lumino/widgets';

import { ILogQuery, isActive } from './model';
import { IJob, IJobsAPI } from './types';

export const LOG_REFRESH_MS = 2000;
export const TAIL_CHOICES = [200, 1000, 5000];

/** ``[rank 3] `` before a line of the every-rank view. */
const RANK_PREFIX = /^\[rank \d+\] /;
/** torchrun's own log lines: ``E1125 17:41:00.242000 10934 torch/distributed/...] failed``. */
const TORCHRUN_LOG = /^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S*torch\/distributed\//;
const RULE = /^(=|-){20,}$/;
const FRAME = /^\s+\S/;

/**
 * Split ``text`` into what a rank's code printed and the launcher's own lines:
 * torchrun's log lines, its ``ChildFailedError`` traceback and the failure
 * summary after it (``Root Cause (first observed failure)`` ... between rules).
 * ``launcher`` counts the lines left out of ``text``.
 */
export function foldLauncher(text: string): { text: string; launcher: number } {
  const lines = text.split('\n');
  const bare = lines.map(line => line.replace(RANK_PREFIX, ''));
  const fold = new Array<boolean>(lines.length).fill(false);
  for (let i = 0; i < lines.length; i++) {
    if (TORCHRUN_LOG.test(bare[i])) {
      fold[i] = true;
    } else if (bare[i].startsWith('Traceback (most recent call last):')) {
      let end = i + 1;
      while (end < lines.length && FRAME.test(bare[end])) {
        end++;
      }
      if (end < lines.length && /ChildFailedError/.test(bare[end])) {
        for (let j = i; j <= end; j++) {
          fold[j] = true;
        }
        i = end;
      }
    } else if (RULE.test(bare[i]) && bare[i].startsWith('=') && / FAILED$/.test(bare[i + 1] ?? '')) {
      let end = i + 1; // the summary: up to the closing rule of '='
      while (end < lines.length && !(RULE.test(bare[end]) && bare[end].startsWith('='))) {
        end++;
      }
      for (let j = i; j <= Math.min(end, lines.length - 1); j++) {
        fold[j] = true;
      }
      i = end;
    }
  }
  const kept = lines.filter((_, i) => !fold[i]);
  return { text: kept.join('\n'), launcher: lines.length - kept.length };
}

/**
 * Shows `GET .../logs?rank=&tail=` of a job. Re-reads every `LOG_REFRESH_MS`
 * while the job is active (`jobState` says so) and the widget is visible.
 */
export class LogViewer extends Widget {
  constructor(
    private readonly api: IJobsAPI,
    readonly job: IJob,
    private readonly jobState: () => string
  ) {
    super();
    this.id = `jp-disttrain-logs-${job.id.replace(/[^a-z0-9-]/g, '-')}`;
    this.addClass('jp-DisttrainLogs');
    this.node.dataset.jobId = job.id;
    this.title.label = `Logs: ${job.name}`;
    this.title.closable = true;

    this.firstLoad = new Promise(resolve => (this.loadedOnce = resolve));
    const bar = (this.bar = document.createElement('div'));
    bar.className = 'jp-DisttrainLogs-toolbar';
    this.rankSelect = document.createElement('select');
    this.rankSelect.className = 'jp-DisttrainLogs-rank';
    this.rankSelect.appendChild(new Option('all ranks', 'all'));
    for (let rank = 0; rank < job.world_size; rank++) {
      this.rankSelect.appendChild(new Option(`rank ${rank}`, String(rank)));
    }
    this.tailSelect = document.createElement('select');
    this.tailSelect.className = 'jp-DisttrainLogs-tail';
    for (const n of TAIL_CHOICES) {
      this.tailSelect.appendChild(new Option(`last ${n} lines`, String(n)));
    }
    const refresh = document.createElement('button');
    refresh.className = 'jp-Button jp-mod-styled jp-DisttrainLogs-refresh';
    refresh.textContent = 'Refresh';
    refresh.addEventListener('click', () => void this.load());
    this.status = document.createElement('span');
    this.status.className = 'jp-DisttrainLogs-status';
    const label = document.createElement('label');
    label.textContent = 'Rank ';
    label.appendChild(this.rankSelect);
    this.launcherBox = document.createElement('input');
    this.launcherBox.type = 'checkbox';
    this.launcherBox.className = 'jp-DisttrainLogs-launcher';
    const launcher = document.createElement('label');
    launcher.title = "torchrun's own lines: its log lines and its failure summary";
    launcher.append(this.launcherBox, ' launcher lines');
    bar.append(label, this.tailSelect, launcher, refresh, this.status);
    this.text = document.createElement('pre');
    this.text.className = 'jp-DisttrainLogs-text';
    this.node.append(bar, this.text);
    this.rankSelect.addEventListener('change', () => void this.load());
    this.tailSelect.addEventListener('change', () => void this.load());
    this.launcherBox.addEventListener('change', () => void this.load());
  }

  readonly rankSelect: HTMLSelectElement;
  private readonly bar: HTMLDivElement;
  readonly tailSelect: HTMLSelectElement;
  /** Unchecked (the default): the launcher's lines are folded away (see :func:`foldLauncher`). */
  readonly launcherBox: HTMLInputElement;
  private readonly status: HTMLSpanElement;
  private readonly text: HTMLPreElement;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private seq = 0;

  /** The rank filter and line count chosen. */
  get query(): ILogQuery {
    const value = this.rankSelect.value;
    return { rank: value === 'all' ? null : Number(value), tail: Number(this.tailSelect.value) };
  }

  /** Resolved once the logs were first read (shown or not). */
  readonly firstLoad: Promise<void>;
  private loadedOnce: () => void = () => undefined;

  /** The height the toolbar and the lines take, in px (the widget scrolls beyond its height). */
  contentHeight(): number {
    return this.bar.offsetHeight + this.text.scrollHeight;
  }

  /** Read the logs now (answers to older requests are dropped). */
  async load(): Promise<void> {
    const seq = ++this.seq;
    const { rank, tail } = this.query;
    try {
      const logs = await this.api.logs(this.job.id, rank, tail);
      if (seq !== this.seq) {
        return;
      }
      const atBottom = this.node.scrollTop + this.node.clientHeight >= this.node.scrollHeight - 8;
      const shown = this.launcherBox.checked ? { text: logs.text, launcher: 0 } : foldLauncher(logs.text);
      this.text.textContent = shown.text || logs.message || (shown.launcher ? 'only launcher lines so far' : '');
      this.node.dataset.rank = rank === null ? 'all' : String(rank);
      this.node.dataset.lines = String(shown.text ? shown.text.split('\n').length : 0);
      this.node.dataset.launcher = String(shown.launcher);
      const notes = [logs.message && logs.text ? logs.message : '',
        shown.launcher ? `${shown.launcher} launcher lines folded` : ''].filter(Boolean);
      this.status.textContent = [this.jobState(), ...notes].join(' - ');
      if (atBottom) {
        this.node.scrollTop = this.node.scrollHeight;
      }
    } catch (err) {
      if (seq === this.seq) {
        this.status.textContent = `cannot read the logs: ${(err as Error).message ?? err}`;
      }
    }
    this.loadedOnce();
  }

  protected onAfterShow(): void {
    void this.loop();
  }

  protected onAfterAttach(): void {
    void this.loop();
  }

  protected onBeforeHide(): void {
    this.halt();
  }

  protected onBeforeDetach(): void {
    this.halt();
  }

  private async loop(): Promise<void> {
    this.halt();
    await this.load();
    if (this.isAttached && this.isVisible && isActive({ state: this.jobState() })) {
      this.timer = setTimeout(() => void this.loop(), LOG_REFRESH_MS);
    }
  }

  private halt(): void {
    if (this.timer !== null) {
      clearTimeout(this.timer);
      this.timer = null;
    }
  }
}
