// The optional fields of a job (progress, phases, first_step_s): sample JSON as the server sends it.

import { firstStepText, formatRate, phaseLine, phaseState, phaseText, progressView, usageText } from '../src/model';
import { IJob } from '../src/types';

const RUNNING: IJob = JSON.parse(`{
  "id": "local/train", "name": "train", "backend": "local", "state": "Running", "reason": "",
  "world_size": 4, "nodes": 2, "nproc": 2, "created": 1000.0, "ended": null, "elapsed": 30.5,
  "step": 39, "steps_per_s": 2.5, "metrics": {"loss": 0.25}, "notebook": "train.ipynb",
  "notebook_file": "/root/train.ipynb", "can_stop": true, "diagnosis": null, "detail": null,
  "progress": {"step": 39, "total": 100, "fraction": 0.39, "eta_s": 24.4, "rate_per_s": 2.5},
  "phases": [
    {"name": "started", "label": "containers started", "state": "done", "started": 1000.0, "ended": 1001.2, "duration_s": 1.2},
    {"name": "rendezvous", "label": "rendezvous", "state": "done", "started": 1001.2, "ended": 1004.0, "duration_s": 2.8},
    {"name": "first_step", "label": "first step", "state": "done", "started": 1004.0, "ended": 1009.0, "duration_s": 5.0}
  ],
  "phase": null,
  "first_step_s": 9.0
}`);

const WAITING: IJob = JSON.parse(`{
  "id": "kubernetes/big", "name": "big", "backend": "kubernetes", "state": "Pending", "reason": "",
  "world_size": 16, "nodes": 4, "nproc": 4, "created": 1000.0, "ended": null, "elapsed": 130,
  "step": null, "steps_per_s": null, "metrics": {}, "notebook": null, "notebook_file": "",
  "can_stop": true, "diagnosis": null, "detail": null,
  "progress": null,
  "phases": [
    {"name": "queued", "label": "queued", "state": "done", "started": 1000.0, "ended": 1003.0, "duration_s": 3.0},
    {"name": "scheduled", "label": "scheduled", "state": "done", "started": 1003.0, "ended": 1010.0, "duration_s": 7.0},
    {"name": "image", "label": "pulling image", "state": "active", "started": 1010.0, "ended": null, "duration_s": 120.0},
    {"name": "started", "label": "containers started", "state": "pending", "started": null, "ended": null, "duration_s": null}
  ],
  "phase": "image",
  "first_step_s": null
}`);

/** A job from a server without these fields at all. */
const OLD: IJob = JSON.parse(`{
  "id": "local/old", "name": "old", "backend": "local", "state": "Running", "reason": "",
  "world_size": 2, "nodes": 1, "nproc": 2, "created": 1000.0, "ended": null, "elapsed": 3,
  "step": 5, "steps_per_s": null, "metrics": {}, "notebook": null, "notebook_file": "",
  "can_stop": true, "detail": null
}`);

describe('progress', () => {
  it('shows a bar, the step of the total, the ETA and the rate', () => {
    expect(progressView(RUNNING.progress)).toEqual({
      percent: 39, text: '39/100', eta: '24s left', rate: '2.50 steps/s'
    });
  });

  it('is absent without progress, and a bare step without a total', () => {
    expect(progressView(WAITING.progress)).toBeNull();
    expect(progressView(OLD.progress)).toBeNull();
    expect(progressView({ step: 7, total: null, fraction: null, eta_s: null, rate_per_s: 1200 })).toEqual({
      percent: null, text: '7', eta: '', rate: '1200 steps/s'
    });
  });

  it('computes the fraction when only step and total are sent, and clamps it', () => {
    expect(progressView({ step: 50, total: 200, fraction: null, eta_s: null, rate_per_s: null })?.percent).toBe(25);
    expect(progressView({ step: 120, total: 100, fraction: 1.2, eta_s: 0, rate_per_s: null })).toEqual({
      percent: 100, text: '120/100', eta: '', rate: ''
    });
    expect(formatRate(0.03125)).toBe('0.0313');
  });
});

describe('phases', () => {
  it('names the phase a waiting job is stuck in, with how long', () => {
    expect(phaseText(WAITING)).toBe('pulling image (2m 00s)');
    expect(WAITING.phases!.map(phaseLine)).toEqual([
      'queued 3s', 'scheduled 7s', 'pulling image 2m 00s', 'containers started'
    ]);
    expect(firstStepText(WAITING)).toBe('');
  });

  it('says the phase a job ended in is unfinished, not current', () => {
    const ended = { ...WAITING.phases![2], ended: 1130.0 };
    expect(phaseState(ended)).toBe('unfinished');
    expect(phaseLine(ended)).toBe('pulling image 2m 00s (not finished)');
    expect(WAITING.phases!.map(phaseState)).toEqual(['done', 'done', 'active', 'pending']);
    expect(phaseLine(WAITING.phases![2])).toBe('pulling image 2m 00s');
  });

  it('says nothing of a phase once running past them or ended', () => {
    expect(phaseText(RUNNING)).toBe('');
    expect(firstStepText(RUNNING)).toBe('after 9s');
    expect(phaseText({ ...WAITING, state: 'Failed' })).toBe('');
    expect(phaseText(OLD)).toBe('');
    expect(firstStepText(OLD)).toBe('');
    expect(phaseText({ state: 'Running', phase: 'rendezvous', phases: [] })).toBe('rendezvous');
  });
});

describe('rank resources', () => {
  it('lists the figures sampled, leaving absent ones out (never 0)', () => {
    const rank = JSON.parse(
      '{"cpu_pct": 95.4, "rss_bytes": 1234567890, "mem_limit_bytes": 4000000000, "gpu_util_pct": null, "gpu_mem_bytes": null}'
    );
    expect(usageText(rank)).toBe('CPU 95%, memory 1.2 GB of 4.0 GB');
    expect(usageText({ cpu_pct: 3, rss_bytes: 5e8, gpu_util_pct: 80, gpu_mem_bytes: 2e9 })).toBe(
      'CPU 3%, memory 500.0 MB, GPU 80%, GPU memory 2.0 GB'
    );
    expect(usageText({})).toBe('');
  });
});
