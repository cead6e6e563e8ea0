/**
 * @jest-environment jsdom
 */
// The sidebar's DOM from sample JSON: three columns, a progress bar with ETA,
// the phase of a waiting job, and the facts and phases of an expanded row.

import './dom-shim';

import { JobsModel } from '../src/model';
import { JobsPanel, splitName } from '../src/panel';
import { IJob, IJobList, IJobsAPI, ILogs, IStopResult } from '../src/types';

const BASE = {
  backend: 'local', reason: '', world_size: 4, nodes: 2, nproc: 2, created: 1000, ended: null,
  elapsed: 30, step: 39, steps_per_s: 2.5, metrics: {}, notebook: 'train.ipynb',
  notebook_file: '/root/train.ipynb', can_stop: true, diagnosis: null, detail: null
};

const JOBS: IJob[] = [
  {
    ...BASE, id: 'local/train', name: 'train', state: 'Running',
    progress: { step: 39, total: 100, fraction: 0.39, eta_s: 24.4, rate_per_s: 2.5 },
    phases: [
      { name: 'started', label: 'containers started', state: 'done', started: 1000, ended: 1001, duration_s: 1 },
      { name: 'rendezvous', label: 'rendezvous', state: 'done', started: 1001, ended: 1003, duration_s: 2 },
      { name: 'first_step', label: 'first step', state: 'done', started: 1003, ended: 1009, duration_s: 6 }
    ],
    phase: null, first_step_s: 9
  },
  {
    ...BASE, id: 'kubernetes/big', name: 'big', backend: 'kubernetes', state: 'Pending', step: null,
    steps_per_s: null, progress: null, first_step_s: null, phase: 'image',
    phases: [
      { name: 'queued', label: 'queued', state: 'done', started: 1000, ended: 1003, duration_s: 3 },
      { name: 'image', label: 'pulling image', state: 'active', started: 1003, ended: null, duration_s: 95 },
      { name: 'started', label: 'containers started', state: 'pending', started: null, ended: null, duration_s: null }
    ]
  },
  { ...BASE, id: 'local/old', name: 'old', state: 'Succeeded', can_stop: false, step: 7 }
];

class API implements IJobsAPI {
  async list(): Promise<IJobList> {
    return { jobs: JOBS, backends: [], running: 2, now: 1100 };
  }
  async job(id: string): Promise<IJob> {
    const job = JOBS.find(j => j.id === id)!;
    return { ...job, detail: { ranks: [], metrics: {}, checkpoints: [], errors: [], stragglers: [], followed: true } };
  }
  async stop(id: string): Promise<IStopResult> {
    return { stopped: false, job: await this.job(id) };
  }
  async logs(id: string, rank: number | null, tail: number): Promise<ILogs> {
    return { id, rank, tail, ranks: [], text: '', message: '' };
  }
}

async function panel(): Promise<JobsPanel> {
  const model = new JobsModel(new API());
  const widget = new JobsPanel(model, { showLogs: () => undefined, openNotebook: () => undefined });
  await model.refresh();
  return widget;
}

const row = (p: JobsPanel, id: string): HTMLElement =>
  p.node.querySelector(`tr.jp-Disttrain-job[data-job-id="${id}"]`) as HTMLElement;

/** A listing one poll old: the job's details, read later, already show it running. */
class LaggingAPI extends API {
  async list(): Promise<IJobList> {
    const pending = { ...JOBS[0], state: 'Pending', phase: 'started', step: null, progress: null };
    return { jobs: [pending, ...JOBS.slice(1)], backends: [], running: 2, now: 1100 };
  }
}

describe('JobsPanel', () => {
  it('shows an open row from its details, read after the listing', async () => {
    const model = new JobsModel(new LaggingAPI());
    const p = new JobsPanel(model, { showLogs: () => undefined, openNotebook: () => undefined });
    await model.refresh();
    expect(row(p, 'local/train').dataset.state).toBe('Pending');
    await model.toggle('local/train');
    expect(row(p, 'local/train').dataset.state).toBe('Running');
    expect(row(p, 'kubernetes/big').dataset.state).toBe('Pending'); // closed rows: the listing
    await model.toggle('local/train');
    expect(row(p, 'local/train').dataset.state).toBe('Pending');
  });


  it('keeps its nodes across a poll that changes nothing, and redraws when one does', async () => {
    const api = new API();
    const model = new JobsModel(api);
    const p = new JobsPanel(model, { showLogs: () => undefined, openNotebook: () => undefined });
    await model.refresh();
    const before = row(p, 'local/train');
    await model.refresh(); // the same listing: a reader's selection or hover is not lost
    expect(row(p, 'local/train')).toBe(before);
    const progress = { ...JOBS[0].progress!, step: 40 };
    api.list = async () => ({ jobs: [{ ...JOBS[0], progress }, ...JOBS.slice(1)], backends: [], running: 2, now: 1100 });
    await model.refresh();
    expect(row(p, 'local/train')).not.toBe(before);
    expect(row(p, 'local/train').querySelector('td.jp-Disttrain-step')!.textContent).toContain('40/100');
  });

  it('has three columns; the others are in the row title', async () => {
    const p = await panel();
    expect(Array.from(p.node.querySelectorAll('thead th')).map(th => th.textContent)).toEqual(['Name', 'State', 'Step']);
    const train = row(p, 'local/train');
    expect(train.querySelectorAll('td').length).toBe(3);
    expect(train.title).toBe('Running\nlocal, 2 node(s) x 2 process(es), 30s');
  });

  it('shows a progress bar with its ETA, or the bare step', async () => {
    const p = await panel();
    const cell = row(p, 'local/train').querySelector('td.jp-Disttrain-step') as HTMLElement;
    expect(cell.dataset.percent).toBe('39');
    expect((cell.querySelector('.jp-Disttrain-progress-fill') as HTMLElement).style.width).toBe('39%');
    expect(cell.querySelector('.jp-Disttrain-progress-text')?.textContent).toBe('39/100');
    expect(cell.querySelector('.jp-Disttrain-eta')?.textContent).toBe('24s left');
    expect(cell.title).toBe('39/100 (39%), 24s left, 2.50 steps/s');
    expect(row(p, 'local/old').querySelector('td.jp-Disttrain-step')?.textContent).toBe('7');
    expect(row(p, 'kubernetes/big').querySelector('td.jp-Disttrain-step')?.textContent).toBe('-');
  });

  it('names the phase a waiting job is in', async () => {
    const p = await panel();
    const phase = row(p, 'kubernetes/big').querySelector('.jp-Disttrain-phase') as HTMLElement;
    expect(phase.textContent).toBe('pulling image (1m 35s)');
    expect(phase.dataset.phase).toBe('image');
    expect(row(p, 'local/train').querySelector('.jp-Disttrain-phase')).toBeNull();
  });

  it('folds the other columns, progress and phases into the expanded row', async () => {
    const p = await panel();
    await p.model.toggle('local/train');
    const detail = p.node.querySelector('tr.jp-Disttrain-detail[data-job-id="local/train"]') as HTMLElement;
    const facts = Object.fromEntries(
      Array.from(detail.querySelectorAll('dd[data-fact]')).map(dd => [(dd as HTMLElement).dataset.fact, dd.textContent])
    );
    expect(facts).toEqual({
      backend: 'local', world: '4 (2 x 2)', elapsed: '30s', step: '39', rate: '2.50 steps/s',
      progress: '39/100 (39%), 24s left', first_step: 'after 9s'
    });
    const phases = Array.from(detail.querySelectorAll('li.jp-Disttrain-phase-item')).map(li => li.textContent);
    expect(phases).toEqual(['containers started 1s', 'rendezvous 2s', 'first step 6s']);

    await p.model.toggle('kubernetes/big');
    const big = p.node.querySelector('tr.jp-Disttrain-detail[data-job-id="kubernetes/big"]') as HTMLElement;
    expect(big.querySelector('dd[data-fact="phase"]')?.textContent).toBe('pulling image (1m 35s)');
    const active = big.querySelector('li.jp-Disttrain-phase-item.jp-mod-active') as HTMLElement;
    expect(active.dataset.phase).toBe('image');
    expect(big.querySelector('dd[data-fact="progress"]')).toBeNull();
  });
});

describe('Clear finished', () => {
  it('hides the finished jobs from the list, keeps the others, deletes nothing', async () => {
    const p = await panel();
    const clear = p.node.querySelector('button[data-action="clear-finished"]') as HTMLButtonElement;
    expect(clear.disabled).toBe(false);
    expect(row(p, 'local/old')).not.toBeNull();
    clear.click();
    expect(row(p, 'local/old')).toBeNull();
    expect(row(p, 'local/train')).not.toBeNull();
    expect(row(p, 'kubernetes/big')).not.toBeNull();
    expect(p.model.jobs.map(j => j.id)).toContain('local/old'); // still listed by the model
    const again = p.node.querySelector('button[data-action="clear-finished"]') as HTMLButtonElement;
    expect(again.disabled).toBe(true);
  });
});

test('a long name keeps its end whole, where default names differ', () => {
  expect(splitName('quickstart-c3-7f2a')).toEqual(['quickstart', '-c3-7f2a']);
  expect(splitName('quickstart-c12-0b1e')).toEqual(['quickstart-', 'c12-0b1e']);
  expect(splitName('train-5be0')).toEqual(['train-5be0', '']);
});
