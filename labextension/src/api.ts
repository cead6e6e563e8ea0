// Requests to the server extension's /disttrain/api (authenticated by the server connection).

import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { IJob, IJobList, IJobsAPI, ILogs, INamespace, IStopResult } from './types';

/** GET/POST `/disttrain/api/<path>`; a non-2xx answer throws with the server's message. */
export async function requestAPI<T>(
  path: string,
  init: RequestInit = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<T> {
  const url = URLExt.join(settings.baseUrl, 'disttrain', 'api', path);
  const response = await ServerConnection.makeRequest(url, init, settings);
  const text = await response.text();
  let data: any = {};
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = { message: text };
    }
  }
  if (!response.ok) {
    throw new ServerConnection.ResponseError(response, data.message ?? response.statusText);
  }
  return data as T;
}

/** The jobs API over HTTP. Job ids are "backend/name" and map to `jobs/<backend>/<name>`. */
export class JobsAPI implements IJobsAPI {
  list(): Promise<IJobList> {
    return requestAPI<IJobList>('jobs');
  }

  namespace(): Promise<INamespace> {
    return requestAPI<INamespace>('namespace');
  }

  job(id: string): Promise<IJob> {
    return requestAPI<IJob>(`jobs/${id}`);
  }

  stop(id: string): Promise<IStopResult> {
    return requestAPI<IStopResult>(`jobs/${id}/stop`, { method: 'POST' });
  }

  logs(id: string, rank: number | null, tail: number): Promise<ILogs> {
    const query = URLExt.objectToQueryString({ rank: rank === null ? 'all' : String(rank), tail: String(tail) });
    return requestAPI<ILogs>(`jobs/${id}/logs${query}`);
  }
}
