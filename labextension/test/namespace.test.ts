/**
 * @jest-environment jsdom
 */
// The sidebar's namespace section: every job of the namespace, whoever started it, listed
// only while the section is shown; a foreign job's Stop asks first and is absent when RBAC
// makes the row read-only.

import './dom-shim';

import { JobsModel } from '../src/model';
import { JobsPanel } from '../src/panel';
import { IJob, IJobList, IJobsAPI, ILogs, INamespace, INamespaceJob, IStopResult } from '../src/types';

const ROW: INamespaceJob = {
  id: 'kubernetes/sdk-job', name: 'sdk-job', backend: 'kubernetes', workload: 'TrainJob', state: 'Running',
  reason: '', progress: 42, eta: 90, created: 1000, nodes: 2, started_by: '', foreign: true, can_stop: true
};

class NamespaceAPI implements IJobsAPI {
  calls: string[] = [];
  rows: INamespaceJob[] = [ROW, { ...ROW, id: 'kubernetes/colleague', name: 'colleague', can_stop: false }];

  async list(): Promise<IJobList> {
    this.calls.push('list');
    return { jobs: [], backends: [], running: 0, now: 2000 };
  }

  async namespace(): Promise<INamespace> {
    this.calls.push('namespace');
    return { jobs: this.rows, backends: [], now: 2000 };
  }

  async job(id: string): Promise<IJob> {
    throw new Error(`no detail for ${id} here`);
  }

  async stop(id: string): Promise<IStopResult> {
    this.calls.push(`stop ${id}`);
    throw new Error('stopped');
  }

  async logs(id: string, rank: number | null, tail: number): Promise<ILogs> {
    return { id, rank, tail, ranks: [], text: '', message: '' };
  }
}

test('the namespace is asked only while its section is shown, and rows show progress', async () => {
  const api = new NamespaceAPI();
  const model = new JobsModel(api);
  await model.refresh();
  expect(api.calls).toEqual(['list']);
  await model.toggleNamespace();
  await model.refresh();
  expect(api.calls).toEqual(['list', 'namespace', 'list', 'namespace']);
  const panel = new JobsPanel(model, { showLogs: () => undefined, openNotebook: () => undefined });
  const rows = Array.from(panel.node.querySelectorAll<HTMLElement>('.jp-Disttrain-namespace-job'));
  expect(rows.map(r => r.dataset.jobId)).toEqual(['kubernetes/sdk-job', 'kubernetes/colleague']);
  expect(rows[0].querySelector('.jp-Disttrain-step')?.textContent).toContain('42%, 1m 30s left');
  expect(rows[0].dataset.foreign).toBe('true');
  expect(rows[1].querySelector('[data-action="stop"]')).toBeNull(); // read-only: RBAC says no
});

test('stopping a foreign job asks first', async () => {
  const api = new NamespaceAPI();
  const model = new JobsModel(api);
  await model.toggleNamespace();
  const panel = new JobsPanel(model, { showLogs: () => undefined, openNotebook: () => undefined });
  const stop = panel.node.querySelector<HTMLButtonElement>('.jp-Disttrain-namespace-job [data-action="stop"]');
  const confirm = jest.spyOn(window, 'confirm').mockReturnValueOnce(false).mockReturnValueOnce(true);
  stop?.click();
  expect(confirm).toHaveBeenCalledTimes(1);
  expect(api.calls).not.toContain('stop kubernetes/sdk-job');
  stop?.click();
  await new Promise(resolve => setTimeout(resolve, 0));
  expect(api.calls).toContain('stop kubernetes/sdk-job');
  expect(confirm.mock.calls[0][0]).toContain('stopping deletes it for everyone');
});
