// The "Distributed Training" sidebar: the jobs table; a row expands to its facts
// (backend, scale, elapsed, progress, phases), ranks, latest metrics and actions.
// The table has three columns so it fits Lab's default sidebar width without
// scrolling sideways; everything else folds into the expanded row. Stable hooks
// for tests: class names below and data-job-id / data-state / data-action /
// data-rank / data-fact / data-phase attributes.

import { Widget } from '@lumino/widgets';

import {
  JobsModel,
  formatBytes,
  formatDuration,
  formatStep,
  formatValue,
  firstStepText,
  isActive,
  phaseLine,
  phaseState,
  phaseText,
  progressView,
  usageText
} from './model';
import { ownErrors } from './errors';
import { IJob, INamespaceJob } from './types';

export interface IPanelActions {
  showLogs(job: IJob): void;
  openNotebook(path: string): void;
}

const COLUMNS = ['Name', 'State', 'Step'];

function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className = '',
  text = ''
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (text) {
    node.textContent = text;
  }
  return node;
}

function button(action: string, label: string, title: string, onClick: () => void): HTMLButtonElement {
  const node = el('button', `jp-Button jp-mod-styled jp-Disttrain-action jp-Disttrain-action-${action}`, label);
  node.dataset.action = action;
  node.title = title;
  node.addEventListener('click', event => {
    event.stopPropagation();
    onClick();
  });
  return node;
}

/** The sidebar widget; re-renders from the model after each change. */
export class JobsPanel extends Widget {
  constructor(
    readonly model: JobsModel,
    private readonly actions: IPanelActions
  ) {
    super();
    this.id = 'jp-disttrain-panel';
    this.addClass('jp-DisttrainPanel');
    this.title.caption = 'Distributed Training';
    this.node.dataset.disttrainPanel = '';
    this.unsubscribe = model.subscribe(() => this.render());
    this.render();
  }

  private unsubscribe: () => void;
  /** Finished jobs the user cleared from this view (id@created); nothing is deleted. */
  private readonly cleared = new Set<string>();

  private shown(): IJob[] {
    return this.model.jobs.filter(job => !this.cleared.has(`${job.id}@${job.created}`));
  }

  /** Hide the finished jobs listed now from this view (their files and records stay). */
  clearFinished(): void {
    for (const job of this.model.jobs) {
      if (!isActive(job)) {
        this.cleared.add(`${job.id}@${job.created}`);
      }
    }
    this.render();
  }

  dispose(): void {
    this.unsubscribe();
    super.dispose();
  }

  protected onAfterShow(): void {
    this.model.setVisible(true);
  }

  protected onAfterHide(): void {
    this.model.setVisible(false);
  }

  render(): void {
    const model = this.model;
    const root = el('div', 'jp-Disttrain-content');
    const header = el('div', 'jp-Disttrain-header');
    header.appendChild(el('h2', 'jp-Disttrain-title', 'Distributed Training'));
    header.appendChild(
      button('refresh', 'Refresh', 'List the jobs again', () => void model.refresh())
    );
    const finished = this.shown().filter(job => !isActive(job)).length;
    const clear = button(
      'clear-finished',
      'Clear finished',
      'Hide the finished jobs from this list (nothing is deleted: %distrain_jobs still lists them)',
      () => this.clearFinished()
    );
    clear.disabled = finished === 0;
    header.appendChild(clear);
    root.appendChild(header);
    if (model.error) {
      root.appendChild(el('div', 'jp-Disttrain-error', model.error));
    }
    for (const backend of model.backends.filter(b => !b.ok)) {
      const note = el('div', 'jp-Disttrain-backend-error', `${backend.name}: ${backend.error}`);
      note.dataset.backend = backend.name;
      root.appendChild(note);
    }
    if (model.loaded && model.jobs.length === 0) {
      root.appendChild(
        el('p', 'jp-Disttrain-empty', 'No jobs yet: run a cell with %%distrain to start one.')
      );
    }
    if (this.shown().length > 0) {
      root.appendChild(el('div', 'jp-Disttrain-tablebox')).appendChild(this.table());
    } else if (model.jobs.length > 0) {
      root.appendChild(el('p', 'jp-Disttrain-empty', 'The finished jobs were cleared from this list.'));
    }
    root.appendChild(this.namespaceSection());
    // The model changes at every poll; the panel's nodes are replaced only when what it shows
    // changed, so a reader's selection, an open row and a hovered button survive a poll.
    if (!this.node.firstElementChild?.isEqualNode(root)) {
      this.node.replaceChildren(root);
    }
  }

  /** Every job of the namespace, whoever started it; a row expands to the same detail. */
  private namespaceSection(): HTMLElement {
    const model = this.model;
    const section = el('div', 'jp-Disttrain-namespace');
    section.dataset.section = 'namespace';
    section.appendChild(
      button('namespace', model.showNamespace ? 'Hide namespace' : 'Namespace',
        'Every TrainJob, PyTorchJob and TFJob of the namespace, whoever started it',
        () => void model.toggleNamespace())
    );
    if (!model.showNamespace) {
      return section;
    }
    if (model.namespaceError) {
      section.appendChild(el('div', 'jp-Disttrain-error', model.namespaceError));
    }
    const table = section.appendChild(el('table', 'jp-Disttrain-table jp-Disttrain-namespace-table'));
    const head = el('tr');
    for (const name of ['Name', 'Kind', 'State', 'Progress']) {
      head.appendChild(el('th', '', name));
    }
    table.appendChild(el('thead')).appendChild(head);
    const body = table.appendChild(el('tbody'));
    for (const job of model.namespaceJobs) {
      body.appendChild(this.namespaceRow(job));
      const detail = model.expanded.has(job.id) ? model.details.get(job.id) : undefined;
      if (detail) {
        const row = this.detailRow(detail, { ...detail, can_stop: false });
        row.querySelector('td')?.setAttribute('colspan', '4');
        body.appendChild(row);
      }
    }
    if (model.namespaceJobs.length === 0) {
      section.appendChild(el('p', 'jp-Disttrain-empty', 'No Kubeflow jobs in the namespace.'));
    }
    return section;
  }

  private namespaceRow(job: INamespaceJob): HTMLTableRowElement {
    const row = el('tr', 'jp-Disttrain-job jp-Disttrain-namespace-job');
    row.dataset.jobId = job.id;
    row.dataset.state = job.state;
    row.dataset.foreign = String(job.foreign);
    const name = row.appendChild(el('td', 'jp-Disttrain-name', job.name));
    name.title = job.foreign ? `started by ${job.started_by || 'another tool'}` : 'started by jupyter-disttrain';
    row.appendChild(el('td', 'jp-Disttrain-workload', job.workload));
    row.appendChild(el('td', `jp-Disttrain-state jp-Disttrain-state-${job.state.toLowerCase()}`, job.state));
    const eta = job.eta !== null && job.eta > 0 && job.state === 'Running' ? `, ${formatDuration(job.eta)} left` : '';
    const cell = row.appendChild(el('td', 'jp-Disttrain-step', job.progress === null ? '-' : `${job.progress}%${eta}`));
    if (job.can_stop) {
      const ask = `Stop ${job.name}? It was started by ${job.started_by || 'another tool or user'}: stopping deletes it for everyone.`;
      cell.appendChild(button('stop', 'Stop', 'Delete this job (asks first)', () => {
        if (!job.foreign || window.confirm(ask)) {
          void this.model.stopJob(job.id);
        }
      }));
    }
    row.title = job.reason ? `${job.state}: ${job.reason}` : job.state;
    row.addEventListener('click', () => void this.model.toggle(job.id));
    return row;
  }

  private table(): HTMLTableElement {
    const table = el('table', 'jp-Disttrain-table');
    const head = el('tr');
    for (const name of COLUMNS) {
      head.appendChild(el('th', `jp-Disttrain-col-${name.toLowerCase()}`, name));
    }
    table.appendChild(el('thead')).appendChild(head);
    const body = table.appendChild(el('tbody'));
    for (const listed of this.shown()) {
      if (!this.model.expanded.has(listed.id)) {
        body.appendChild(this.row(listed));
        continue;
      }
      // an open row shows its detail's reading: read after the listing, never older, so the
      // row cannot say "Pending" above ranks its details show ended
      const job = this.model.job(listed.id) ?? listed;
      body.appendChild(this.row(job));
      body.appendChild(this.detailRow(job, job));
    }
    return table;
  }

  private row(job: IJob): HTMLTableRowElement {
    const row = el('tr', 'jp-Disttrain-job');
    row.dataset.jobId = job.id;
    row.dataset.state = job.state;
    row.dataset.backend = job.backend;
    row.dataset.source = job.source ?? 'job';
    if (this.model.expanded.has(job.id)) {
      row.classList.add('jp-mod-expanded');
    }
    const name = row.appendChild(el('td', 'jp-Disttrain-name'));
    name.dataset.name = job.name;
    // a long name is cut in its middle: its end (a cell's count, random digits) tells rows apart
    const [head, tail] = splitName(job.name);
    const text = name.appendChild(el('span', 'jp-Disttrain-name-text'));
    const line = text.appendChild(el('span', 'jp-Disttrain-name-line'));
    line.appendChild(el('span', 'jp-Disttrain-name-head', head));
    if (tail) {
      line.appendChild(el('span', 'jp-Disttrain-name-tail', tail));
    }
    name.title = job.name;
    if (job.source === 'session') {
      text.appendChild(el('span', 'jp-Disttrain-session', 'session'));
      name.title = `${job.name}: a warm worker group (%%distrain --session runs cells on its live ranks)`;
    }
    const state = row.appendChild(el('td', `jp-Disttrain-state jp-Disttrain-state-${job.state.toLowerCase()}`));
    state.appendChild(el('span', 'jp-Disttrain-state-text', job.state));
    const phase = phaseText(job);
    if (phase) {
      state.appendChild(el('span', 'jp-Disttrain-phase', phase)).dataset.phase = job.phase ?? '';
    }
    row.appendChild(this.progressCell(job));
    row.title = [
      job.reason ? `${job.state}: ${job.reason}` : job.state,
      `${job.backend}, ${job.nodes} node(s) x ${job.nproc} process(es), ${formatDuration(job.elapsed)}`,
      job.diagnosis ?? ''
    ]
      .filter(Boolean)
      .join('\n');
    row.addEventListener('click', () => void this.model.toggle(job.id));
    return row;
  }

  /** The step, or a progress bar with its ETA when the job sends a total. */
  private progressCell(job: IJob): HTMLTableCellElement {
    const cell = el('td', 'jp-Disttrain-step');
    const view = progressView(job.progress);
    if (view === null || view.percent === null) {
      cell.textContent = view?.text ?? formatStep(job.step);
      return cell;
    }
    cell.classList.add('jp-mod-progress');
    cell.dataset.percent = String(view.percent);
    cell.title = [`${view.text} (${view.percent}%)`, view.eta, view.rate].filter(Boolean).join(', ');
    const bar = cell.appendChild(el('div', 'jp-Disttrain-progress'));
    bar.appendChild(el('div', 'jp-Disttrain-progress-fill')).style.width = `${view.percent}%`;
    cell.appendChild(el('div', 'jp-Disttrain-progress-text', view.text));
    if (view.eta && isActive(job)) {
      cell.appendChild(el('div', 'jp-Disttrain-eta', view.eta));
    }
    return cell;
  }

  /** What the row's hidden columns said, and more: one name/value list. */
  private facts(listed: IJob): HTMLElement {
    const list = el('dl', 'jp-Disttrain-facts');
    const add = (key: string, label: string, value: string, title = ''): void => {
      if (!value) {
        return;
      }
      list.appendChild(el('dt', '', label)).dataset.fact = key;
      const dd = list.appendChild(el('dd', '', value));
      dd.dataset.fact = key;
      if (title) {
        dd.title = title;
      }
    };
    add('backend', 'Backend', listed.backend);
    add('world', 'World', `${listed.world_size} (${listed.nodes} x ${listed.nproc})`,
      `${listed.nodes} node(s) x ${listed.nproc} process(es)`);
    add('elapsed', 'Elapsed', formatDuration(listed.elapsed));
    add('step', 'Step', formatStep(listed.step));
    if (listed.steps_per_s !== null && listed.steps_per_s > 0) {
      add('rate', 'Rate', `${listed.steps_per_s.toPrecision(3)} steps/s`);
    }
    const view = progressView(listed.progress);
    if (view) {
      const percent = view.percent === null ? '' : ` (${view.percent}%)`;
      add('progress', 'Progress', [`${view.text}${percent}`, isActive(listed) ? view.eta : ''].filter(Boolean).join(', '), view.rate);
    }
    add('phase', 'Phase', phaseText(listed));
    add('first_step', 'First step', firstStepText(listed));
    return list;
  }

  /** The start phases and their durations (the active one marked, the one it ended in said so). */
  private phases(job: IJob): HTMLElement | null {
    const phases = job.phases ?? [];
    if (phases.length === 0) {
      return null;
    }
    const list = el('ol', 'jp-Disttrain-phases');
    for (const phase of phases) {
      const state = phaseState(phase);
      const item = list.appendChild(el('li', `jp-Disttrain-phase-item jp-mod-${state}`, phaseLine(phase)));
      item.dataset.phase = phase.name;
      item.dataset.state = state;
    }
    return list;
  }

  private detailRow(job: IJob, listed: IJob): HTMLTableRowElement {
    const row = el('tr', 'jp-Disttrain-detail');
    row.dataset.jobId = job.id;
    const cell = el('td');
    cell.colSpan = COLUMNS.length;
    row.appendChild(cell);
    const model = this.model;

    const actions = cell.appendChild(el('div', 'jp-Disttrain-actions'));
    const stop = button('stop', 'Stop', 'Stop every process of this job', () => void model.stopJob(job.id));
    stop.disabled = !listed.can_stop;
    actions.appendChild(stop);
    actions.appendChild(button('logs', 'Show logs', 'Open the ranks\' output', () => this.actions.showLogs(job)));
    const notebook = listed.notebook;
    const open = button(
      'notebook',
      'Open notebook',
      notebook ? `Open ${notebook}` : 'The notebook that started this job is not known',
      () => notebook && this.actions.openNotebook(notebook)
    );
    open.disabled = !notebook;
    actions.appendChild(open);
    const count = job.detail?.checkpoints.length ?? 0;
    actions.appendChild(
      button('checkpoints', `Checkpoints (${count})`, 'The checkpoints this job wrote', () =>
        model.toggleCheckpoints(job.id)
      )
    );
    const note = model.notes.get(job.id);
    if (note && note !== listed.reason) {
      cell.appendChild(el('div', 'jp-Disttrain-note', note));
    }
    if (listed.reason) {
      cell.appendChild(el('div', 'jp-Disttrain-reason', listed.reason));
    }
    if (listed.diagnosis && listed.diagnosis !== listed.reason) {
      cell.appendChild(el('div', 'jp-Disttrain-diagnosis', listed.diagnosis));
    }
    if (listed.recovered) {
      cell.appendChild(el('div', 'jp-Disttrain-note jp-Disttrain-recovered', listed.recovered));
    }
    if (listed.error) {
      cell.appendChild(el('div', 'jp-Disttrain-reason', listed.error));
    }
    cell.appendChild(this.facts(listed));
    const phases = this.phases(listed);
    if (phases) {
      cell.appendChild(phases);
    }
    if (listed.notebook_file) {
      cell.appendChild(el('div', 'jp-Disttrain-notebook-file', `notebook: ${listed.notebook_file}`));
    }
    const detail = job.detail;
    if (detail === null) {
      cell.appendChild(el('div', 'jp-Disttrain-loading', 'loading...'));
      return row;
    }
    if (model.showCheckpoints.has(job.id)) {
      cell.appendChild(this.checkpoints(job));
    }
    const metrics = Object.entries(detail.metrics);
    if (metrics.length > 0) {
      const list = cell.appendChild(el('dl', 'jp-Disttrain-metrics'));
      for (const [name, row] of metrics) {
        const term = list.appendChild(el('dt', '', name));
        term.dataset.metric = name;
        const value = list.appendChild(
          el('dd', '', `${formatValue(row.mean)} (min ${formatValue(row.min)}, max ${formatValue(row.max)}, step ${row.step})`)
        );
        value.dataset.metric = name;
      }
    }
    if (!detail.followed) {
      cell.appendChild(
        el('div', 'jp-Disttrain-unfollowed', isActive(listed) ? 'reading the job...' : 'ranks not recorded')
      );
    }
    const summary = detail.summary ?? [];
    if ((detail.ranks_total ?? 0) > detail.ranks.length && summary.length > 0) {
      // a large job: its ranks by state as ranges; the table lists only the ranks that differ
      const box = cell.appendChild(el('ul', 'jp-Disttrain-rank-summary'));
      box.dataset.ranks = String(detail.ranks_total);
      for (const group of summary) {
        const noun = group.count === 1 ? 'rank' : 'ranks';
        const item = box.appendChild(el('li', '', `${group.count} ${group.state}: ${noun} ${group.ranks}`));
        item.dataset.state = group.state;
        item.title = `on nodes ${group.nodes}`;
      }
    }
    if (detail.ranks.length > 0) {
      // many metrics: the rank table scrolls in its box, the sidebar does not
      cell.appendChild(el('div', 'jp-Disttrain-ranksbox')).appendChild(this.ranks(job, Object.keys(detail.metrics)));
    }
    // each rank's own error once (the same error of many ranks on one line, none the reason
    // above already says), then the ranks that only lost their peer
    for (const error of ownErrors(detail.errors, listed.reason, listed.world_size).slice(0, 3)) {
      const line = cell.appendChild(el('pre', 'jp-Disttrain-rank-error', `${error.where}: ${error.text}`));
      line.dataset.ranks = error.ranks.join(',');
    }
    for (const error of detail.errors.filter(e => e.peer).slice(0, 3)) {
      // a consequence: said plainly, the library's own words behind a disclosure
      const where = error.rank === null ? 'job' : `rank ${error.rank}`;
      const peer = cell.appendChild(el('details', 'jp-Disttrain-rank-peer'));
      peer.dataset.rank = String(error.rank);
      peer.appendChild(el('summary', '', `${where}: ${error.peer}`));
      peer.appendChild(el('pre', '', `${error.type}: ${error.message}`));
    }
    return row;
  }

  private ranks(job: IJob, metricNames: string[]): HTMLTableElement {
    const table = el('table', 'jp-Disttrain-ranks');
    const head = el('tr');
    for (const name of ['Rank', 'State', 'Step', ...metricNames]) {
      head.appendChild(el('th', '', name));
    }
    table.appendChild(el('thead')).appendChild(head);
    const body = table.appendChild(el('tbody'));
    const stragglers = new Set(job.detail?.stragglers ?? []);
    for (const rank of job.detail?.ranks ?? []) {
      const row = body.appendChild(el('tr', 'jp-Disttrain-rank'));
      row.dataset.rank = String(rank.rank);
      row.dataset.state = rank.state;
      if (stragglers.has(rank.rank)) {
        row.classList.add('jp-mod-straggler');
      }
      const where = `node ${rank.node}, ${rank.host} local rank ${rank.local_rank}`;
      row.title = [rank.reason, where, usageText(rank)].filter(Boolean).join('\n');
      row.appendChild(el('td', '', String(rank.rank)));
      row.appendChild(el('td', `jp-Disttrain-state-${rank.state.toLowerCase()}`, rank.state));
      row.appendChild(el('td', '', formatStep(rank.step)));
      for (const name of metricNames) {
        const value = rank.latest[name];
        row.appendChild(el('td', '', value === undefined ? '' : formatValue(value)));
      }
    }
    return table;
  }

  private checkpoints(job: IJob): HTMLElement {
    const box = el('div', 'jp-Disttrain-checkpoints');
    box.dataset.jobId = job.id;
    const items = job.detail?.checkpoints ?? [];
    if (items.length === 0) {
      box.appendChild(el('p', '', 'No checkpoint reported yet.'));
      return box;
    }
    const list = box.appendChild(el('ul'));
    for (const ckpt of items) {
      const item = list.appendChild(el('li', 'jp-Disttrain-checkpoint'));
      item.dataset.step = String(ckpt.step);
      item.dataset.status = ckpt.status;
      item.appendChild(el('span', 'jp-Disttrain-checkpoint-step', `step ${ckpt.step}`));
      if (ckpt.status !== 'ok' && ckpt.status !== 'reported') {
        item.appendChild(el('span', 'jp-Disttrain-checkpoint-status', ckpt.status));
      }
      item.appendChild(el('code', 'jp-Disttrain-checkpoint-uri', ckpt.uri));
      const size = formatBytes(ckpt.bytes);
      if (size) {
        item.appendChild(el('span', 'jp-Disttrain-checkpoint-size', size));
      }
    }
    return box;
  }
}

/** A name as a head that may be cut and a tail always shown: `quickstart` + `-c3-7f2a`. */
export function splitName(name: string): [string, string] {
  if (name.length <= 12) {
    return [name, ''];
  }
  return [name.slice(0, -8), name.slice(-8)];
}
