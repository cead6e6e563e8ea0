"""Following a Kubernetes job live: watches on the job, its pods and its Events, one log.

:class:`KubernetesRun` keeps a fixed number of long-lived connections
whatever the worker count and turns what it sees into job events.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, cast

from ... import events as ev
from ...spec import JobSpec
from ...terminal import physical_lines
from ..base import EventSink, Submission, deliver
from ..streams import line_events
from . import phases as kp
from . import podlogs
from .client import Connection, api_error, error_words, transport_error
from .held import HeldEvents
from .kinds import KubeflowKind, kind_of
from .logs import kept_logs
from .plainwatch import plain_watch
from .podruns import PodRuns, Seen, seen
from .reported import Reported
from .staging import INIT_NAME
from .status import copier_events, init_state, pod_facts, warning_message

if TYPE_CHECKING:
    from kubernetes import watch

WATCH_SECONDS = 60
#: Consecutive watch streams cut by the connection before the follower gives up.
MAX_DROPPED_WATCHES = 5
DRAIN_SECONDS = 15.0
#: Events kept for pods the pod watch has not shown yet (their ranks are not known yet).
MAX_EARLY = 1000
#: Failed tries of an init container's name look-up that make the name unresolved.
NAME_TRIES = 3
#: Seconds between two reads of the log of a pod waiting in an init container for a name.
NAME_POLL_SECONDS = 5.0
#: Warning reasons that explain a job that does not start.
PENDING_REASONS = frozenset({"FailedScheduling", "Failed", "BackOff", "FailedMount"})


class Cluster(Protocol):
    """What a followed job needs of its backend: delete the job, stream a pod's log."""

    def delete(self, conn: Connection, kind: KubeflowKind, name: str) -> bool:
        """Delete job ``name`` (foreground); False if it was not there."""
        ...

    def stream_log(
        self,
        conn: Connection,
        pod: str,
        container: str,
        *,
        follow: bool,
        tail: int | None = None,
        previous: bool = False,
    ) -> Iterator[str]:
        """The pod's log lines (followed while it runs with ``follow``; ``previous`` run)."""
        ...


class KubernetesRun(Submission):
    """Follows one job: watches translate to events; stop deletes the job."""

    def __init__(
        self, backend: Cluster, conn: Connection, spec: JobSpec, sink: EventSink, key: bytes | None
    ) -> None:
        self.backend = backend
        self.conn = conn
        self.spec = spec
        self.sink = sink
        #: Worker lines count only when signed with the job's key (None: none count).
        self.trust = None if key is None else ev.Trust.of(key, spec.nodes, spec.nproc)
        self.name = spec.name
        self.kubeflow = kind_of(spec.framework, dict(spec.options).get("kubeflow_api"))
        self.plural, self.kind = self.kubeflow.plural, self.kubeflow.kind
        self.container = self.kubeflow.container
        self._done = threading.Event()
        self._detached = threading.Event()  # set by detach(): log streams end at their next line
        self._stopping = threading.Event()
        self._stop_reason = ""
        self._lock = threading.Lock()
        self._pods: dict[str, Seen] = {}  # pod -> what was last seen of it
        self._followed: dict[str, threading.Thread] = {}
        self._read_once: dict[tuple[str, int], threading.Thread] = {}  # (pod, run) -> reader
        self._held = HeldEvents(sink)  # a failed pod's rank events, until its log was read
        self._runs = PodRuns(self.container, spec.nproc)  # what each pod's objects tell
        self._replayed = False  # a failed job's logs were read whole: no pod's log again
        # pods waiting in an init container for a name: pod -> (container, name)
        self._name_waits: dict[str, tuple[str, str]] = {}
        self._name_poller: threading.Thread | None = None
        self._watches: list[watch.Watch] = []
        self._has_leader = True
        self._terminal: tuple[ev.JobState, str, str] | None = None
        self._state = ""
        self._pending_why: tuple[str, str] | None = None
        self._got_result = False
        self._errors: list[str] = []
        self._stop_outcome: tuple[ev.JobState, str, str] | None = None
        # start-up phases: pod -> node, Events of pods not seen yet, facts already sent
        self._nodes: dict[str, int] = {}
        self._early: dict[str, list[tuple[kp.Fact, float]]] = {}
        self._phase_sent: dict[tuple[str, str, tuple[int, ...] | None], str] = {}
        self._reported: tuple[Reported | None, int] = (None, 0)  # (last report, reports seen)

    # -- Submission ------------------------------------------------------------
    def start(self) -> None:
        """Start the watches (each on its own daemon thread)."""
        for target in (self._watch_job, self._watch_pods, self._watch_events):
            threading.Thread(
                target=self._guard(target), daemon=True, name=f"distrain-k8s-{target.__name__}"
            ).start()
        if self.spec.timeout:
            threading.Thread(target=self._guard(self._deadline), daemon=True).start()

    def stop(self, reason: str = "stopped by user") -> None:
        """Delete the job (foreground propagation): its pods and payload go with it."""
        if self._done.is_set() or self._stopping.is_set():
            return
        self._stop_reason = reason
        self._stopping.set()
        self.backend.delete(self.conn, self.kubeflow, self.name)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the terminal state."""
        return self._done.wait(timeout)

    def remove(self) -> None:
        """Delete the job object, ended or not, in its own namespace (pods and payload too)."""
        self.backend.delete(self.conn, self.kubeflow, self.name)

    def detach(self) -> None:
        """Stop following; the job runs on. The watches end at once; a log stream is closed
        at its next line."""
        self._detached.set()
        self._done.set()
        for w in list(self._watches):
            w.stop()

    # -- plumbing --------------------------------------------------------------
    def _guard(self, target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except Exception as exc:  # report instead of dying silently
                if not self._done.is_set():
                    self._say(f"watch error: {error_words(exc)}")

        return run

    def _say(self, text: str) -> None:
        """Tell the user ``text``: a log line of no rank, from Kubernetes."""
        self.sink(ev.Event("log", None, time.time(), {"text": text, "source": "kubernetes"}))

    def _stream(
        self, func: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Iterator[dict[str, Any]]:
        """Watch events until the job is done, re-opening after server time-outs."""
        version: str | None = None
        dropped = 0  # consecutive watches cut off by the connection
        while not self._done.is_set():
            w = plain_watch()
            self._watches.append(w)
            try:
                for item in w.stream(
                    func, *args, timeout_seconds=WATCH_SECONDS, resource_version=version, **kwargs
                ):
                    obj = item["object"]
                    data = self.conn.plain(obj)
                    version = data.get("metadata", {}).get("resourceVersion") or version
                    yield {"type": item["type"], "object": data}
                    if self._done.is_set():
                        return
            except api_error() as exc:
                if exc.status == 410:  # too old: start over from now
                    version = None
                    continue
                raise
            except transport_error():  # the stream was cut: watch again from here
                dropped += 1
                if dropped > MAX_DROPPED_WATCHES:
                    raise
                time.sleep(0.2 * dropped)
                continue
            finally:
                self._watches.remove(w)
            dropped = 0

    def _watch_job(self) -> None:
        last: tuple[ev.JobState, str, str] | None = None
        ran = False  # the job read Running: pods that start again are a restart's
        for item in self._stream(
            self.conn.custom.list_namespaced_custom_object,
            self.kubeflow.group,
            self.kubeflow.version,
            self.conn.namespace,
            self.plural,
            field_selector=f"metadata.name={self.name}",
        ):
            if item["type"] == "DELETED":
                if self._stopping.is_set():
                    self._finish(self._stop_outcome or ("Stopped", "Stopped", self._stop_reason))
                else:
                    self._finish(("Failed", "Deleted", f"the {self.kind} was deleted"))
                return
            self._has_leader = self.kubeflow.has_leader(item["object"])
            if self.trust is None:  # a job without this tool's key: what its object reports
                self._report(item["object"])
            current = self.kubeflow.condition(item["object"], ran)
            if last is None:  # the job is waiting from its creation on
                self._phase(
                    kp.Fact(
                        "queued",
                        "waiting",
                        f"waiting for the {self.kind}'s pods",
                        item["object"].get("metadata", {}).get("creationTimestamp"),
                    ),
                    None,
                    time.time(),
                )
            if current is not None and current[1] == "Queued":
                self._phase(kp.Fact("queued", "waiting", current[2], None), None, time.time())
            if current is None or current == last:
                continue
            ended_before = last is None and current[0] == "Failed"  # a replay of a failed job
            last = current
            ran = ran or current[0] == "Running"
            self._state = current[0]
            if current[0] == "Pending" and self._pending_why:  # keep the known cause
                current = ("Pending", *self._pending_why)
            if current[0] in ev.TERMINAL_STATES:
                if ended_before:
                    self._read_ended()
                self._finish(current)
                return
            self.sink(ev.job_event(*current))

    def _report(self, obj: dict[str, Any]) -> None:
        """The progress and metrics a foreign job reports in its object, as rank 0's
        ``progress`` and ``metric`` events (display data: they change no state)."""
        reported = self.kubeflow.reported(obj)
        if reported is None or reported == self._reported[0]:
            return
        count = self._reported[1] + 1
        self._reported = (reported, count)
        values = {k: v for k, v in reported.metrics.items() if k != "step"}
        step = reported.metrics.get("step", float(count))
        now = time.time()
        if values:
            self.sink(ev.Event("metric", 0, now, {"step": int(step), "values": values}))
        if reported.percent is not None:
            self.sink(ev.Event("progress", 0, now, {"step": reported.percent, "total": 100}))

    def _watch_pods(self) -> None:
        for item in self._stream(
            self.conn.core.list_namespaced_pod,
            self.conn.namespace,
            label_selector=self.kubeflow.pod_selector(self.name),
        ):
            if item["type"] == "DELETED":
                continue
            node = self.kubeflow.node_index(item["object"], self._has_leader)
            facts = pod_facts(item["object"], self.container, node)
            key = seen(facts)
            arrived = time.time()
            with self._lock:
                previous = self._pods.get(facts.name)
                self._pods[facts.name] = key
                self._nodes[facts.name] = facts.node
                early = self._early.pop(facts.name, [])
            ranks = self._ranks(facts.node)
            for fact in kp.pod_facts(item["object"], self.container):
                self._phase(fact, ranks, arrived)
            for fact, when in early:
                self._phase(fact, ranks, when)
            read_once = not (facts.node == 0 and facts.started)
            told, failed = self._runs.told(item["object"], facts, previous)
            held = read_once and failed
            if held:
                self._held.hold(facts.name)  # until its log was read (_read_log_once)
            self._held.tell(facts.name, told)
            staging, why = init_state(item["object"], INIT_NAME)
            if staging == "failed":
                for event in copier_events(item["object"], self.trust, facts.name):
                    self.sink(event)  # the failure reads as staging's whichever pod failed
                self._fail(
                    (
                        "Failed",
                        "DataStagingFailed",
                        f"--data staging failed on pod {facts.name}: {why}",
                    )
                )
            elif staging == "running" and facts.node == 0:
                self._follow(facts.name, facts.restarts, INIT_NAME)
            waits = self.kubeflow.name_wait(item["object"])
            if waits is not None:
                self._watch_name_wait(facts.name, *waits)
            else:
                with self._lock:
                    self._name_waits.pop(facts.name, None)
            if not read_once:
                self._follow(facts.name, facts.restarts)  # (a followed pod is not read once)
            else:  # the run before this one, had the watch not seen it end; this one if failed
                last = facts.restarts + 1 if facts.state == "Failed" else facts.restarts
                self._read_log_once(facts.name, range(max(facts.restarts - 1, 0), last), held)

    def _watch_events(self) -> None:
        """Warnings explain a job that does not start; Normal Events time its phases."""
        prefix = f"{self.name}-"
        for item in self._stream(self.conn.core.list_namespaced_event, self.conn.namespace):
            obj = item["object"]
            involved = obj.get("involvedObject") or {}
            name = str(involved.get("name", ""))
            if item["type"] == "DELETED" or (name != self.name and not name.startswith(prefix)):
                continue
            arrived = time.time()
            if name == self.name and involved.get("kind") == self.kind:
                queued = kp.queue_fact(obj)
                if queued is not None:
                    self._phase(queued, None, arrived)
            elif (fact := kp.event_fact(obj, self.container)) is not None:
                with self._lock:
                    node = self._nodes.get(name)
                    if node is None and sum(map(len, self._early.values())) < MAX_EARLY:
                        self._early.setdefault(name, []).append((fact, arrived))
                if node is not None:
                    self._phase(fact, self._ranks(node), arrived)
            if obj.get("type") != "Warning":
                continue
            text = warning_message(obj)
            self._say(text)
            reason = str(obj.get("reason"))
            if reason in PENDING_REASONS and self._state in ("", "Pending"):
                self._pending_why = (reason, text)
                self.sink(ev.job_event("Pending", reason, text))  # why it does not start

    def _ranks(self, node: int) -> list[int]:
        return list(range(node * self.spec.nproc, (node + 1) * self.spec.nproc))

    def _phase(self, fact: kp.Fact, ranks: list[int] | None, arrived: float) -> None:
        """Send a phase fact once (a ``done`` once per ranks, a ``waiting`` when it changes)."""
        key = (fact.phase, fact.state, None if ranks is None else tuple(ranks))
        with self._lock:
            if key in self._phase_sent and (
                fact.state == "done" or self._phase_sent[key] == fact.message
            ):
                return
            self._phase_sent[key] = fact.message
        t = kp.observed_at(fact.stamp, arrived)
        self.sink(ev.phase_event(fact.phase, fact.state, ranks, fact.message, t))

    def _follow(self, pod: str, restarts: int, container: str | None = None) -> None:
        key = f"{pod}#{restarts}" + (f"/{container}" if container else "")
        with self._lock:
            if key in self._followed or self._replayed:
                return
            thread = threading.Thread(
                target=self._guard(lambda: self._pump(pod, True, container)),
                daemon=True,
                name=f"distrain-log-{pod}",
            )
            # Started before anyone can see it: _finish joins every follower it finds, and
            # joining a thread that is not started yet raises (that ended the job watch
            # without a terminal state when the job ended as its node-0 pod was first seen).
            thread.start()
            self._followed[key] = thread

    def _watch_name_wait(self, pod: str, container: str, name: str) -> None:
        """Note a pod waiting in ``container`` for ``name`` to resolve; one poller per job
        reads such a container's log now and then (no stream held open) and, once it
        failed ``NAME_TRIES`` times, says so once (a ``kubernetes`` log line)."""
        with self._lock:
            self._name_waits[pod] = (container, name)
            if self._name_poller is not None:
                return
            self._name_poller = threading.Thread(
                target=self._guard(self._poll_name_waits), daemon=True, name="distrain-names"
            )
            self._name_poller.start()

    def _poll_name_waits(self) -> None:
        while not self._done.wait(NAME_POLL_SECONDS):
            with self._lock:
                waiting = sorted(self._name_waits.items())
            for pod, (container, name) in waiting[:1]:  # one pod says it for the job
                try:
                    lines = self.backend.stream_log(self.conn, pod, container, follow=False)
                    tries = sum(1 for _ in lines)
                except api_error():  # gone, or its init container done: the watch says which
                    continue
                if tries >= NAME_TRIES:
                    text = (
                        f"pod {pod} waits for the master address {name}: its {container} "
                        f"could not resolve it {tries} times"
                    )
                    self._say(text)
                    return

    def _read_ended(self) -> None:
        """A job that had failed before this follower first saw it: read once what its pods
        said, from the logs kept when it failed (its pods may be gone), else from its failed
        pods and node 0's still there; its pods' watch reads no log after this."""
        with self._lock:
            self._replayed = True
        texts = podlogs.job_texts(self.conn, self.name, self._failed_or_leader) or {}
        for pod, text in sorted(texts.items()):
            for line in physical_lines(text):
                deliver(self.sink, line_events(line, None, self.trust, source=pod, prefixed=True))

    def _failed_or_leader(self, pod: Any) -> bool:
        """Whether ``pod`` failed or runs node 0 (the pods a failed job's reading needs)."""
        if pod.status is not None and pod.status.phase == "Failed":
            return True
        return self.kubeflow.node_index(self.conn.plain(pod), self._has_leader) == 0

    def _read_log_once(self, pod: str, runs: range, held: bool) -> None:
        """Read the logs of the pod's ``runs`` (restart counts) not read yet, once, in one
        reader (two readers of neighbouring runs would both read the run between), unless a
        follower reads that pod; then, when ``held``, end the hold of the pod's events
        taken for these runs (at once when no reader was started for them)."""
        with self._lock:
            followed = any(k.startswith(pod + "#") for k in self._followed)
            unread = [] if self._replayed or followed else runs
            unread = [run for run in unread if (pod, run) not in self._read_once]
            if unread:

                def read_then_release() -> None:
                    try:
                        self._read_runs(pod, unread[0], unread[-1])
                    finally:
                        if held:
                            self._held.release(pod)

                thread = threading.Thread(target=self._guard(read_then_release), daemon=True)
                thread.start()  # before it is seen: _finish joins it (its error is the cause)
                for run in unread:
                    self._read_once[(pod, run)] = thread
                return
        if held:
            self._held.release(pod)

    def _read_runs(self, pod: str, first: int, last: int) -> None:
        def read(previous: bool) -> list[str]:
            return list(
                self.backend.stream_log(
                    self.conn, pod, self.container, follow=False, previous=previous
                )
            )

        lines = podlogs.run_lines(
            read, lambda: podlogs.restart_count(self.conn, pod, self.container), first, last
        )
        self._deliver(pod, lines)

    def _pump(self, pod: str, follow: bool, container: str | None = None) -> None:
        lines = self.backend.stream_log(self.conn, pod, container or self.container, follow=follow)
        try:
            self._deliver(pod, lines)
        finally:
            close = getattr(lines, "close", None)
            if callable(close):
                close()  # the response is closed, not left to the garbage collector

    def _deliver(self, pod: str, lines: Iterable[str]) -> None:
        """Pod ``pod``'s log lines as events, until the follower is detached."""
        for line in lines:
            if self._detached.is_set():
                return
            events = line_events(line, None, self.trust, source=pod, prefixed=True)
            deliver(self.sink, events)
            if any(event.kind == "result" for event in events):
                self._got_result = True  # delivered: _finish need not read again

    def _fail(self, outcome: tuple[ev.JobState, str, str]) -> None:
        """End the job now with ``outcome``: delete it (its pods would retry forever)."""
        if self._stopping.is_set() or self._done.is_set():
            return
        self._stop_outcome, self._stop_reason = outcome, outcome[2]
        self._stopping.set()
        self.backend.delete(self.conn, self.kubeflow, self.name)
        self._finish(outcome)

    def _deadline(self) -> None:
        assert self.spec.timeout is not None
        if self._done.wait(self.spec.timeout + 5):
            return
        self._stop_reason = f"did not finish within {self.spec.timeout:g} s"
        self._stopping.set()
        self.backend.delete(self.conn, self.kubeflow, self.name)
        self._finish(("Failed", "Timeout", self._stop_reason))

    def _finish(self, outcome: tuple[ev.JobState, str, str]) -> None:
        with self._lock:
            if self._terminal is not None:
                return
            self._terminal = outcome
        deadline = time.monotonic() + DRAIN_SECONDS
        self._join_followers(deadline)  # rank 0's log delivers its last lines (the result)
        if outcome[0] == "Failed" and outcome[1] not in ("Deleted", "Timeout", "DataStagingFailed"):
            self._keep_logs_and_end_pods()
        if outcome[0] == "Succeeded":  # and the other pods report how they ended
            while time.monotonic() < deadline and not self._pods_ended():
                time.sleep(0.05)
            # A follower that saw the job end before its pods (a re-attach) starts reading
            # node 0's log only once the pods' watch reports that pod: wait for it too.
            self._join_followers(deadline)
            if not self._got_result:  # an elastic restart moved rank 0 to another pod
                with self._lock:
                    others = sorted(set(self._pods) - self._followed_pods())
                for pod in others:
                    self._pump(pod, follow=False)
        self.sink(ev.job_event(*outcome))
        self._done.set()
        for w in list(self._watches):
            w.stop()

    def _join_followers(self, deadline: float) -> None:
        """Wait until ``deadline`` (monotonic) for every log follower and reader started so
        far."""
        with self._lock:
            followers = [*self._followed.values(), *self._read_once.values()]
        for thread in followers:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _keep_logs_and_end_pods(self) -> None:
        """A failed job: keep failing pods' logs in full and others' tails, then end its pods.

        The logs go into a ConfigMap owned by the job (so ``logs()`` still
        works after the pods are gone, from any kernel); then the pods still
        running are deleted: nothing keeps computing for a job that failed. A
        failing pod whose log no reader took yet (the pod watch had not shown it
        failing: it lags behind a large job) is read for its lines' events here,
        before the job's end: its rank's error is the cause.
        """
        with self._lock:
            last_seen = dict(self._pods)
            read = {pod for pod, _ in self._read_once} | self._followed_pods()
            replayed = self._replayed  # an attach to a job that had failed: logs were read
        last_seen.update(self._pods_now())  # a restart the pod watch has not shown yet counts
        texts = podlogs.failed_job_texts(
            self.conn, self.container, {pod: (s, r) for pod, (s, r, _) in last_seen.items()}
        )
        for pod, (state, restarts, _) in sorted(last_seen.items()):
            if (state == "Failed" or restarts > 0) and pod not in read and not replayed:
                self._deliver(pod, texts[pod].split("\n"))
        ns = self.conn.namespace
        try:
            owner: Any = self.conn.custom.get_namespaced_custom_object(
                self.kubeflow.group, self.kubeflow.version, ns, self.plural, self.name
            )
            record = kept_logs(self.name, texts, self.conn.plain(owner))
            self.conn.core.create_namespaced_config_map(ns, cast(Any, record))
        except api_error() as exc:
            if exc.status != 409:  # 409: another follower of the job kept them first
                self._say(f"could not keep the job's logs ({exc.status} {exc.reason})")
        try:
            self.conn.core.delete_collection_namespaced_pod(
                ns, label_selector=self.kubeflow.pod_selector(self.name), grace_period_seconds=0
            )
        except api_error() as exc:
            self._say(f"could not end the job's pods ({exc.status} {exc.reason})")

    def _pods_now(self) -> dict[str, Seen]:
        """The job's pods as the API server has them now: pod -> (state, restarts, reason);
        empty when they cannot be listed (what the pod watch saw stands then)."""
        try:
            listed: Any = self.conn.core.list_namespaced_pod(
                self.conn.namespace, label_selector=self.kubeflow.pod_selector(self.name)
            )
        except (api_error(), transport_error(), OSError):
            return {}
        now = {}
        for pod in listed.items:
            facts = pod_facts(self.conn.plain(pod), self.container, 0)
            now[facts.name] = seen(facts)
        return now

    def _followed_pods(self) -> set[str]:
        """The pods whose log a follower reads (or read); the caller holds the lock."""
        return {key.split("#")[0] for key in self._followed}

    def _pods_ended(self) -> bool:
        """Whether every pod reported how it ended and node 0's log is being read."""
        with self._lock:
            states = [state for state, _, _ in self._pods.values()]
            leaders = {pod for pod, node in self._nodes.items() if node == 0}
            reading = self._replayed or bool(leaders & self._followed_pods())
        ended = len(states) >= self.spec.nodes and all(s in ("Succeeded", "Failed") for s in states)
        return ended and reading
