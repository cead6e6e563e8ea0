import {
  FAST_MS,
  HIDDEN_MS,
  IDLE_MS,
  JobsModel,
  formatBytes,
  formatDuration,
  formatStep,
  formatValue,
  isActive,
  pollInterval,
  statusText
} from '../src/model';
import { IJob, IJobList, IJobsAPI, ILogs, IStopResult } from '../src/types';

function job(name: string, state = 'Running', extra: Partial<IJob> = {}): IJob {
  return {
    id: `local/${name}`, name, backend: 'local', state, reason: '', world_size: 4, nodes: 2,
    nproc: 2, created: 1000, ended: null, elapsed: 12, step: 3, steps_per_s: 1.5,
    metrics: { loss: 0.5 }, notebook: 'train.ipynb', notebook_file: '/root/train.ipynb',
    can_stop: state === 'Running', detail: null, ...extra
  };
}

class FakeAPI implements IJobsAPI {
  jobs: IJob[] = [];
  calls: string[] = [];
  failList = false;
  stopped = new Set<string>();

  async list(): Promise<IJobList> {
    this.calls.push('list');
    if (this.failList) {
      throw new Error('server went away');
    }
    const jobs = this.jobs.map(j => (this.stopped.has(j.id) ? { ...j, state: 'Stopped', can_stop: false } : j));
    return { jobs, backends: [{ name: 'local', ok: true, error: '' }], running: jobs.filter(isActive).length, now: 1234 };
  }

  async job(id: string): Promise<IJob> {
    this.calls.push(`job ${id}`);
    const found = this.jobs.find(j => j.id === id);
    if (!found) {
      throw new Error(`no job ${id}`);
    }
    return {
      ...found,
      detail: { ranks: [], metrics: {}, checkpoints: [], errors: [], stragglers: [], followed: true }
    };
  }

  async stop(id: string): Promise<IStopResult> {
    this.calls.push(`stop ${id}`);
    const wasRunning = !this.stopped.has(id);
    this.stopped.add(id);
    return { stopped: wasRunning, job: { ...(await this.job(id)), state: 'Stopped', detail: null } };
  }

  async logs(id: string, rank: number | null, tail: number): Promise<ILogs> {
    return { id, rank, tail, ranks: [0, 1], text: '', message: '' };
  }
}

/** Timers the test fires by hand. */
class ManualTimers {
  pending: { fn: () => void; ms: number }[] = [];
  set(fn: () => void, ms: number): unknown {
    const entry = { fn, ms };
    this.pending.push(entry);
    return entry;
  }
  clear(handle: unknown): void {
    this.pending = this.pending.filter(p => p !== handle);
  }
  async fire(): Promise<void> {
    const next = this.pending.shift();
    next?.fn();
    await new Promise(resolve => setTimeout(resolve, 0));
  }
}

describe('formatting', () => {
  it('formats durations', () => {
    expect(formatDuration(0)).toBe('0s');
    expect(formatDuration(42.9)).toBe('42s');
    expect(formatDuration(184)).toBe('3m 04s');
    expect(formatDuration(7500)).toBe('2h 05m');
    expect(formatDuration(-3)).toBe('0s');
  });

  it('formats metric values, steps and sizes', () => {
    expect(formatValue(0.123456)).toBe('0.1235');
    expect(formatValue(7)).toBe('7');
    expect(formatValue(0.00001234)).toBe('1.234e-5');
    expect(formatValue('NaN')).toBe('NaN');
    expect(formatStep(null)).toBe('-');
    expect(formatStep(0)).toBe('0');
    expect(formatBytes(null)).toBe('');
    expect(formatBytes(512)).toBe('512 B');
    expect(formatBytes(1_234_567)).toBe('1.2 MB');
    expect(statusText(1)).toBe('1 training job running');
    expect(statusText(0)).toBe('0 training jobs running');
  });

  it('polls fast only while the panel shows running jobs', () => {
    expect(pollInterval(true, 2)).toBe(FAST_MS);
    expect(pollInterval(true, 0)).toBe(FAST_MS);
    expect(pollInterval(false, 1)).toBe(IDLE_MS);
    expect(pollInterval(false, 0)).toBe(HIDDEN_MS);
    expect(isActive({ state: 'Pending' })).toBe(true);
    expect(isActive({ state: 'Succeeded' })).toBe(false);
  });
});

describe('JobsModel', () => {
  it('lists jobs, loads the detail of expanded rows and drops the details of vanished jobs', async () => {
    const api = new FakeAPI();
    api.jobs = [job('a'), job('b', 'Succeeded')];
    const model = new JobsModel(api);
    let changes = 0;
    model.subscribe(() => changes++);
    await model.refresh();
    expect(model.jobs.map(j => j.id)).toEqual(['local/a', 'local/b']);
    expect(model.running).toBe(1);
    expect(model.now).toBe(1234);
    expect(model.loaded).toBe(true);
    expect(changes).toBe(1);

    await model.toggle('local/a');
    expect(model.expanded.has('local/a')).toBe(true);
    expect(model.job('local/a')?.detail?.followed).toBe(true);
    api.calls = [];
    await model.refresh();
    expect(api.calls).toEqual(['list', 'job local/a']);

    // between two polls a new run of the name replaced the old run's record: the row stays
    // open, its old detail is dropped and nothing is read for it until it is listed again
    api.jobs = [job('b', 'Succeeded')];
    api.calls = [];
    await model.refresh();
    expect(api.calls).toEqual(['list']);
    expect(model.details.size).toBe(0);
    expect(model.job('local/a')).toBeUndefined();
    expect(model.expanded.has('local/a')).toBe(true);
    api.jobs = [job('a', 'Running', { created: 2000 }), job('b', 'Succeeded')];
    await model.refresh();
    expect(api.calls).toEqual(['list', 'list', 'job local/a']);
    expect(model.job('local/a')?.created).toBe(2000);
    expect(model.job('local/a')?.detail?.followed).toBe(true);

    await model.toggle('local/b');
    await model.toggle('local/b');
    await model.toggle('local/a');
    expect(model.expanded.size).toBe(0);
  });

  it('keeps the last listing and reports an error when the server fails', async () => {
    const api = new FakeAPI();
    api.jobs = [job('a')];
    const model = new JobsModel(api);
    await model.refresh();
    api.failList = true;
    await model.refresh();
    expect(model.error).toBe('cannot list jobs: server went away');
    expect(model.jobs.map(j => j.id)).toEqual(['local/a']);
    api.failList = false;
    await model.refresh();
    expect(model.error).toBe('');
  });

  it('stops a job and notes the outcome', async () => {
    const api = new FakeAPI();
    api.jobs = [job('a')];
    const model = new JobsModel(api);
    await model.refresh();
    await model.stopJob('local/a');
    expect(api.calls).toContain('stop local/a');
    expect(model.jobs[0].state).toBe('Stopped');
    expect(model.running).toBe(0);
    // the run ended: its row says its own reason, not the note of the request
    expect(model.notes.has('local/a')).toBe(false);
  });

  it('keeps a stop note while its run lasts and drops it for a new run of the name', async () => {
    const api = new FakeAPI();
    api.jobs = [job('a')];
    api.stop = async () => {
      throw new Error('server said no');
    };
    const model = new JobsModel(api);
    await model.refresh();
    await model.stopJob('local/a');
    expect(model.notes.get('local/a')).toBe('stop failed: server said no');
    await model.refresh();
    expect(model.notes.get('local/a')).toBe('stop failed: server said no'); // the run goes on
    api.jobs = [job('a', 'Running', { created: 2000 })]; // the same --name run again
    await model.refresh();
    expect(model.notes.has('local/a')).toBe(false);
  });

  it('shares one request between concurrent refreshes', async () => {
    const api = new FakeAPI();
    const model = new JobsModel(api);
    await Promise.all([model.refresh(), model.refresh(), model.refresh()]);
    expect(api.calls).toEqual(['list']);
  });

  it('schedules polls by visibility and running jobs, and stops polling', async () => {
    const api = new FakeAPI();
    api.jobs = [job('a')];
    const timers = new ManualTimers();
    const model = new JobsModel(api, timers);
    model.start();
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(timers.pending.map(p => p.ms)).toEqual([IDLE_MS]); // hidden, one job running
    model.setVisible(true); // shows: polls at once, then fast
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(timers.pending.map(p => p.ms)).toEqual([FAST_MS]);
    model.setVisible(false);
    api.jobs = [job('a', 'Succeeded')];
    await timers.fire();
    expect(timers.pending.map(p => p.ms)).toEqual([HIDDEN_MS]); // hidden, nothing running
    model.stopPolling();
    expect(timers.pending).toEqual([]);
    expect(api.calls.filter(c => c === 'list').length).toBe(3);
  });
});
