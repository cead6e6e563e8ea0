// The notification and the status bar say the cause the monitor chose (the sidebar JSON of a
// recorded failure, written by tests/monitor/test_cause_views.py), and a hang is news once.
import { readFileSync } from 'fs';
import { join } from 'path';

import { JobEndWatcher, endMessage, hungMessage } from '../src/ends';
import { statusText } from '../src/model';
import { IJob } from '../src/types';

const FIXTURE = join(__dirname, '..', '..', 'tests', 'data', 'events', 'rank1_raises.job.json');
const LINE = 'rank 1: ValueError: bad batch at step 5; 3 ranks stopped as a consequence';

function failed(): IJob {
  return JSON.parse(readFileSync(FIXTURE, 'utf-8')) as IJob;
}

describe('the cause in the notification', () => {
  it('says the sidebar JSON reason, the monitor cause line', () => {
    const job = failed();
    expect(job.reason).toBe(LINE);
    expect(job.cause_rank).toBe(1);
    expect(endMessage(job)).toBe(`Training job ${job.name} failed: ${LINE}`);
  });

  it('announces the failure once, as an error, with that text', () => {
    const watcher = new JobEndWatcher();
    const job = failed();
    expect(watcher.update([{ ...job, state: 'Running', reason: '' }], 10)).toEqual([]);
    const ends = watcher.update([job], 12);
    expect(ends.map(e => [e.kind, e.message])).toEqual([
      ['error', `Training job ${job.name} failed: ${LINE}`]
    ]);
  });

  it('tells a recovered success as history', () => {
    const job = { ...failed(), state: 'Succeeded', reason: '4 ranks done',
      recovered: 'recovered from 1 failure (rank 1: RuntimeError: flaky loader)' };
    expect(endMessage(job)).toMatch(
      /succeeded after .*, step 5 \(recovered from 1 failure \(rank 1: RuntimeError: flaky loader\)\)$/
    );
  });
});

describe('a hang', () => {
  const hung = (): IJob => ({
    ...failed(), state: 'Hung', reason: '', can_stop: true, ended: null,
    diagnosis: 'Hang: no rank wrote anything for 3 s. Rank 1 holds up the others'
  });

  it('is announced once per hang, as a warning, and again after the ranks moved', () => {
    const watcher = new JobEndWatcher();
    const running = { ...hung(), state: 'Running', diagnosis: null };
    expect(watcher.update([running], 10)).toEqual([]);
    const first = watcher.update([hung()], 12);
    expect(first.map(e => e.kind)).toEqual(['warning']);
    expect(first[0].message).toBe(hungMessage(hung()));
    expect(first[0].message.startsWith(`Training job ${running.name} hung: Hang: no rank`)).toBe(true);
    expect(watcher.update([hung()], 14)).toEqual([]);
    expect(watcher.update([running], 16)).toEqual([]);
    expect(watcher.update([hung()], 18).map(e => e.kind)).toEqual(['warning']);
  });

  it('shows in the status bar', () => {
    expect(statusText(2, 1)).toBe('2 training jobs running, 1 hung');
    expect(statusText(1)).toBe('1 training job running');
  });
});
