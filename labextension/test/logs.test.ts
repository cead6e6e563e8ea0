/**
 * @jest-environment jsdom
 */
// The log viewer folds the launcher's own lines (torchrun's log lines, its ChildFailedError
// traceback and failure summary, recorded from a real 2x2 job) and keeps the ranks' output;
// logs below a Notebook 7 notebook take the height they need.
import './dom-shim';

import { readFileSync } from 'fs';
import { join } from 'path';

import { fittedShare } from '../src/layout';
import { foldLauncher } from '../src/logs';

const EVENTS = join(__dirname, '..', '..', 'tests', 'data', 'events', 'rank1_raises.jsonl');

/** The job-wide lines torchrun's agents printed in the recorded job. */
function launcherLines(): string[] {
  return readFileSync(EVENTS, 'utf-8')
    .split('\n')
    .filter(Boolean)
    .map(line => JSON.parse(line) as { kind: string; rank: number | null; source?: string; text?: string })
    .filter(e => e.kind === 'log' && e.rank === null && (e.source ?? '').startsWith('agent-'))
    .map(e => e.text ?? '');
}

const OWN = [
  'step 3 loss 0.25',
  'Traceback (most recent call last):',
  '  File "<distrain-cell>", line 7, in <module>',
  'ValueError: bad batch at step 5',
  '============================================================',
  'epoch 1 done'
];

describe('launcher lines in the log viewer', () => {
  it('folds every line of the recorded launcher output and keeps the ranks\' own', () => {
    const launcher = launcherLines();
    expect(launcher.some(l => l.startsWith('Root Cause'))).toBe(true);
    expect(launcher.some(l => /failed \(exitcode: 1\)/.test(l))).toBe(true);
    const text = [...OWN.slice(0, 2), ...launcher, ...OWN.slice(2)].join('\n');
    const shown = foldLauncher(text);
    expect(shown.text.split('\n')).toEqual(OWN);
    expect(shown.launcher).toBe(launcher.length);
  });

  it('reads the every-rank view, its lines prefixed with their rank', () => {
    const launcher = launcherLines();
    const text = [...OWN, ...launcher].map(l => `[rank 0] ${l}`).join('\n');
    const shown = foldLauncher(text);
    expect(shown.text.split('\n')).toEqual(OWN.map(l => `[rank 0] ${l}`));
    expect(shown.launcher).toBe(launcher.length);
  });

  it('keeps a user traceback and a user rule of "=" untouched', () => {
    const text = OWN.join('\n');
    expect(foldLauncher(text)).toEqual({ text, launcher: 0 });
  });
});

describe('the logs below a Notebook 7 notebook', () => {
  it('take the height of their content, at least a few lines and at most 40%', () => {
    expect(fittedShare(200, 800)).toBe(0.25);
    expect(fittedShare(20, 900)).toBeCloseTo(90 / 900);
    expect(fittedShare(5000, 800)).toBe(0.4);
    expect(fittedShare(100, 0)).toBe(0.4);
  });
});
