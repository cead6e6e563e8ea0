import {
  GROUP_MS,
  IJobEnd,
  JobEndWatcher,
  MAX_MESSAGE,
  endMessage,
  groupKind,
  groupMessage,
  isQuiet,
  joinGroup,
  overHangs,
  runKey
} from '../src/ends';
import { IJob } from '../src/types';

function job(name: string, state: string, extra: Partial<IJob> = {}): IJob {
  return {
    id: `local/${name}`, name, backend: 'local', state, reason: '', world_size: 2, nodes: 1,
    nproc: 2, created: 100, ended: null, elapsed: 64, step: 39, steps_per_s: 2,
    metrics: {}, notebook: 'train.ipynb', notebook_file: '/root/train.ipynb',
    can_stop: state === 'Running', detail: null, ...extra
  };
}

describe('JobEndWatcher', () => {
  it('announces a job seen running once, when it ends', () => {
    const watcher = new JobEndWatcher();
    expect(watcher.update([job('a', 'Running')], 110)).toEqual([]);
    expect(watcher.update([job('a', 'Running')], 112)).toEqual([]);
    const ends = watcher.update([job('a', 'Succeeded')], 115);
    expect(ends.map(e => [e.job.id, e.kind])).toEqual([['local/a', 'success']]);
    expect(ends[0].message).toBe('Training job a succeeded after 1m 04s, step 39');
    expect(watcher.update([job('a', 'Succeeded')], 117)).toEqual([]);
    expect(watcher.update([job('a', 'Succeeded')], 119)).toEqual([]);
  });

  it('leaves jobs that had ended before the first listing alone', () => {
    const watcher = new JobEndWatcher();
    expect(watcher.update([job('old', 'Failed', { reason: 'exit 1' })], 500)).toEqual([]);
    expect(watcher.update([job('old', 'Failed', { reason: 'exit 1' })], 502)).toEqual([]);
  });

  it('announces a job that started and ended between two polls', () => {
    const watcher = new JobEndWatcher();
    watcher.update([], 100);
    const ends = watcher.update([job('quick', 'Failed', { created: 103, reason: 'rank 1 exited with 1' })], 110);
    expect(ends.map(e => e.kind)).toEqual(['error']);
    expect(ends[0].message).toBe('Training job quick failed: rank 1 exited with 1');
  });

  it('announces a new job under an old name, and a restarted job ending again', () => {
    const watcher = new JobEndWatcher();
    watcher.update([job('a', 'Running')], 110);
    expect(watcher.update([job('a', 'Stopped', { reason: 'stop requested' })], 111)[0].message).toBe(
      'Training job a stopped after 1m 04s, step 39: stop requested'
    );
    const again = watcher.update([job('a', 'Running', { created: 200 })], 201);
    expect(again).toEqual([]);
    expect(watcher.update([job('a', 'Succeeded', { created: 200 })], 230).map(e => e.kind)).toEqual(['success']);
  });

  it('announces each pause in the debugger once, with where the rank stopped', () => {
    const watcher = new JobEndWatcher();
    expect(watcher.update([job('a', 'Running')], 110)).toEqual([]);
    const paused = job('a', 'Paused', { reason: 'rank 1 paused at cell:9 in <module>' });
    const ends = watcher.update([paused], 112);
    expect(ends.map(e => [e.kind, e.message])).toEqual([
      ['info', 'Training job a paused: rank 1 paused at cell:9 in <module>']
    ]);
    expect(watcher.update([paused], 113)).toEqual([]);
    expect(watcher.update([job('a', 'Running')], 114)).toEqual([]);
    expect(watcher.update([paused], 115).length).toBe(1);
  });

  it('keeps messages short and names a failure without a reason', () => {
    expect(endMessage(job('f', 'Failed'))).toBe('Training job f failed: no reason given');
    expect(endMessage(job('f', 'Failed', { diagnosis: 'NCCL timeout on rank 3' }))).toBe(
      'Training job f failed: NCCL timeout on rank 3'
    );
    const long = endMessage(job('f', 'Failed', { reason: 'x'.repeat(400) }));
    expect(long.length).toBe(MAX_MESSAGE);
    expect(long.endsWith('…')).toBe(true);
    expect(endMessage(job('s', 'Succeeded', { step: null, elapsed: 3 }))).toBe('Training job s succeeded after 3s');
  });
});

describe('notices several quiet ends share', () => {
  const end = (name: string, state: string): IJobEnd => ({
    job: job(name, state),
    kind: state === 'Failed' ? 'error' : state === 'Succeeded' ? 'success' : 'info',
    message: endMessage(job(name, state))
  });

  it('joins successes and stops that follow each other, naming each job', () => {
    let group = { ends: [end('nb-c3-aaaa', 'Succeeded')], at: 1000 };
    const second = joinGroup(group, end('nb-c5-bbbb', 'Succeeded'), 1000 + GROUP_MS);
    expect(second).not.toBeNull();
    group = second!;
    expect(groupKind(group.ends)).toBe('success');
    const third = joinGroup(group, end('nb-c7-cccc', 'Stopped'), 1000 + GROUP_MS + 10);
    expect(third!.ends.map(e => e.job.name)).toEqual(['nb-c3-aaaa', 'nb-c5-bbbb', 'nb-c7-cccc']);
    expect(groupMessage(third!.ends)).toBe(
      '3 training jobs ended: nb-c3-aaaa succeeded, nb-c5-bbbb succeeded, nb-c7-cccc stopped'
    );
    expect(groupKind(third!.ends)).toBe('info');
  });

  it('keeps a failure, a hang and a late end apart', () => {
    const group = { ends: [end('a', 'Succeeded')], at: 1000 };
    expect(joinGroup(group, end('b', 'Failed'), 1001)).toBeNull();
    expect(joinGroup(group, { ...end('c', 'Hung'), kind: 'warning' }, 1001)).toBeNull();
    expect(joinGroup(group, end('d', 'Succeeded'), 1000 + GROUP_MS + 1)).toBeNull();
    expect(joinGroup(null, end('e', 'Succeeded'), 1000)).toBeNull();
    expect(groupMessage(group.ends)).toBe(group.ends[0].message);
  });

  it('never counts a pause as an end, nor one job twice', () => {
    const watcher = new JobEndWatcher();
    watcher.update([job('debug-demo', 'Running')], 110);
    const [pause] = watcher.update([job('debug-demo', 'Paused', { reason: 'rank 1 paused' })], 111);
    expect(pause.event).toBe('paused');
    expect(isQuiet(pause)).toBe(false);
    const [done] = watcher.update([job('debug-demo', 'Succeeded')], 112);
    expect(isQuiet(done)).toBe(true);
    expect(joinGroup({ ends: [pause], at: 1000 }, done, 1001)).toBeNull();
    const twice = joinGroup({ ends: [done], at: 1000 }, done, 1001);
    expect(twice!.ends.length).toBe(1);
    expect(groupMessage(twice!.ends)).toBe(done.message);
  });

  it('clips a long shared notice to what Lab shows', () => {
    const ends = Array.from({ length: 12 }, (_, i) => end(`notebook-c${i}-abcd`, 'Succeeded'));
    expect(groupMessage(ends).length).toBe(MAX_MESSAGE);
  });
});

describe('hang notices', () => {
  it('are taken down once their run no longer reads Hung, and only then', () => {
    const hung = job('h', 'Hung');
    const notices = new Map([[runKey(hung), 'notice-1']]);
    expect(overHangs(notices, [hung])).toEqual([]);
    expect(overHangs(notices, [job('h', 'Stopped')])).toEqual([runKey(hung)]);
    expect(overHangs(notices, [job('h', 'Running')])).toEqual([runKey(hung)]);
    expect(overHangs(notices, [])).toEqual([runKey(hung)]);
    // the same name run again and hung: the old run's notice goes, the new one's stays
    const again = job('h', 'Hung', { created: 200 });
    expect(overHangs(notices, [again])).toEqual([runKey(hung)]);
  });
});
