// The JSON of /disttrain/api/... : the TypedDicts of jupyter_disttrain/server/views.py
// (views.TYPESCRIPT names each interface's); tests/server/test_types_ts.py checks every
// field against them. A field may be optional or also null here, never narrower.

/** A metric value: a number, or "NaN" / "Infinity" / "-Infinity". */
export type JSONFloat = number | string;

export interface IBackendStatus {
  name: string;
  ok: boolean;
  error: string;
}

export interface IRank {
  rank: number;
  node: number;
  local_rank: number;
  host: string;
  state: string;
  restarts: number;
  step: number | null;
  exit_code: number | null;
  reason: string;
  latest: Record<string, JSONFloat>;
  /** Resource figures (null or absent when not sampled: shown as absent, never 0). */
  cpu_pct?: number | null;
  rss_bytes?: number | null;
  mem_limit_bytes?: number | null;
  gpu_util_pct?: number | null;
  gpu_mem_bytes?: number | null;
}

export interface IMetricRow {
  step: number;
  mean: JSONFloat;
  min: JSONFloat;
  max: JSONFloat;
  ranks: number;
}

export interface ICheckpoint {
  step: number;
  uri: string;
  bytes: number | null;
  rank: number | null;
  t: number;
  /** ok, incomplete or corrupt (from the checkpoint directory), or reported (by a rank). */
  status: string;
}

export interface IErrorRow {
  rank: number | null;
  t: number;
  type: string;
  message: string;
  traceback: string;
  /** "lost its peer (rank 1 failed)" when the error only reports the failing rank's end, else "". */
  peer: string;
}

export interface IJobDetail {
  ranks: IRank[];
  metrics: Record<string, IMetricRow>;
  checkpoints: ICheckpoint[];
  errors: IErrorRow[];
  stragglers: number[];
  followed: boolean;
  /** Optional (absent from older servers). Ranks of the job: a large one lists in `ranks`
   * only those that differ. */
  ranks_total?: number;
  /** Every rank by state, as ranges ("0-4095, 4100-8191"), the largest group first. */
  summary?: IStateRange[];
  /** Ranks slower per step than the median, slowest first. */
  slow?: ISlowRow[];
}

export interface IStateRange {
  state: string;
  count: number;
  ranks: string;
  nodes: string;
}

export interface ISlowRow {
  rank: number;
  node: number;
  step_s: number;
  factor: number;
}

/** How far a job is: from `report(step=, total=)` or a tqdm bar (any field may be null). */
export interface IProgress {
  step: number | null;
  total: number | null;
  /** 0..1, null when the total is unknown. */
  fraction: number | null;
  eta_s: number | null;
  rate_per_s: number | null;
}

/** One phase of a job's start: queued, scheduled, image, started, rendezvous, first_step. */
export interface IPhase {
  name: string;
  label: string;
  /** "done", "active" or "pending". */
  state: string;
  started: number | null;
  ended: number | null;
  duration_s: number | null;
  /** What an active phase waits for ("" otherwise). */
  detail?: string;
}

export interface IJob {
  /** "backend/name": names are unique per backend only. */
  id: string;
  name: string;
  backend: string;
  state: string;
  reason: string;
  world_size: number;
  nodes: number;
  nproc: number;
  created: number;
  ended: number | null;
  elapsed: number;
  step: number | null;
  steps_per_s: number | null;
  metrics: Record<string, JSONFloat>;
  /** Contents-API path of the notebook that started the job, null when unknown. */
  notebook: string | null;
  notebook_file: string;
  can_stop: boolean;
  /** The job's one-sentence reading (communication problem or failure), null when none. */
  diagnosis?: string | null;
  /** The rank that caused a failure (the monitor's one choice), null when none. */
  cause_rank?: number | null;
  /** "recovered from 1 failure (rank 1: ...)": history of a restart, "" when none. */
  recovered?: string;
  /** The running ranks stopped reporting (steps_per_s is then null). */
  stalled?: boolean;
  detail: IJobDetail | null;
  /** Optional: absent from servers that do not send them (null when unknown). */
  progress?: IProgress | null;
  phases?: IPhase[];
  /** The name of the current phase, null when none (or the job has ended). */
  phase?: string | null;
  /** Seconds from submit to the first report(), null before it. */
  first_step_s?: number | null;
  /** "session" for a warm worker group (%distrain_session), else "job". */
  source?: string;
  /** Why the job's view could not be built ("" when it was); it is shown from its record. */
  error?: string;
}

export interface IJobList {
  jobs: IJob[];
  backends: IBackendStatus[];
  running: number;
  now: number;
}

export interface ILogs {
  id: string;
  rank: number | null;
  tail: number | null;
  ranks: number[];
  text: string;
  message: string;
}

export interface IStopResult {
  stopped: boolean;
  job: IJob;
}

/** What the model needs from the server (the real one is in api.ts; tests pass fakes). */
/** A row of the namespace section: any job of the namespace, whoever started it. */
export interface INamespaceJob {
  id: string;
  name: string;
  backend: string;
  /** The Kubeflow kind of the job's object (TrainJob, PyTorchJob, ...). */
  workload: string;
  state: string;
  reason: string;
  progress: number | null;
  eta: number | null;
  created: number;
  nodes: number;
  started_by: string;
  foreign: boolean;
  can_stop: boolean;
}

export interface INamespace {
  jobs: INamespaceJob[];
  backends: IBackendStatus[];
  now: number;
}

export interface IJobsAPI {
  list(): Promise<IJobList>;
  /** Every job of the namespace (GET /disttrain/api/namespace); optional for other APIs. */
  namespace?(): Promise<INamespace>;
  job(id: string): Promise<IJob>;
  stop(id: string): Promise<IStopResult>;
  logs(id: string, rank: number | null, tail: number): Promise<ILogs>;
}

export const TERMINAL_STATES: ReadonlySet<string> = new Set(['Succeeded', 'Failed', 'Stopped']);
