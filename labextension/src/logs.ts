// A main-area log viewer for one job: a rank filter, a line count, live while the job runs.

import { Widget } from '@lumino/widgets';

import { ILogQuery, isActive } from './model';
import { IJob, IJobsAPI } from './types';

export const LOG_REFRESH_MS = 2000;
export const TAIL_CHOICES = [200, 1000, 5000];

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

    const bar = document.createElement('div');
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
    bar.append(label, this.tailSelect, refresh, this.status);
    this.text = document.createElement('pre');
    this.text.className = 'jp-DisttrainLogs-text';
    this.node.append(bar, this.text);
    this.rankSelect.addEventListener('change', () => void this.load());
    this.tailSelect.addEventListener('change', () => void this.load());
  }

  readonly rankSelect: HTMLSelectElement;
  readonly tailSelect: HTMLSelectElement;
  private readonly status: HTMLSpanElement;
  private readonly text: HTMLPreElement;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private seq = 0;

  /** The rank filter and line count chosen. */
  get query(): ILogQuery {
    const value = this.rankSelect.value;
    return { rank: value === 'all' ? null : Number(value), tail: Number(this.tailSelect.value) };
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
      this.text.textContent = logs.text || logs.message;
      this.node.dataset.rank = rank === null ? 'all' : String(rank);
      this.node.dataset.lines = String(logs.text ? logs.text.split('\n').length : 0);
      this.status.textContent = `${this.jobState()}${logs.message && logs.text ? ` - ${logs.message}` : ''}`;
      if (atBottom) {
        this.node.scrollTop = this.node.scrollHeight;
      }
    } catch (err) {
      if (seq === this.seq) {
        this.status.textContent = `cannot read the logs: ${(err as Error).message ?? err}`;
      }
    }
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
