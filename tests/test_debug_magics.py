"""``%distrain_debug`` and the debugger console (real ipywidgets) on a real local job."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from html import unescape

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from jupyter_disttrain import service as jobs
from jupyter_disttrain.job import Job
from jupyter_disttrain.sessions import SessionError
from jupyter_disttrain.spec import JobSpec
from jupyter_disttrain.widgets.debug_console import ALL, DebugConsole
from tests.waiting import wait_for

CELL = textwrap.dedent(
    """
    import torch.distributed as dist
    rank = dist.get_rank()
    batch = {"idx": 8123 + rank}
    if rank == 1:
        breakpoint()
        batch["idx"] += 1
    if rank == 3:
        batch["missing"]
    dist.barrier()
    rank
    """
).lstrip()


def answers(console: DebugConsole) -> str:
    return unescape(console.answers.value)


@pytest.fixture(scope="module")
def shell() -> Iterator[InteractiveShell]:
    ip = InteractiveShell.instance()
    ip.extension_manager.load_extension("jupyter_disttrain")
    yield ip


@pytest.fixture(scope="module")
def paused_job(shell: InteractiveShell) -> Iterator[Job]:
    """A 2x2 job with --post-mortem: rank 1 at a breakpoint, rank 3 held after a KeyError."""
    service = jobs.default_service()
    spec = JobSpec("dbg-magic", nodes=2, nproc=2, post_mortem=True)
    job = service.run(service.plan(spec, CELL))
    try:
        wait_for(lambda: len(job.paused()) == 2, 90, f"ranks did not pause\n{job.logs()}")
        yield job
    finally:
        job.stop()


def test_post_mortem_is_an_option_and_a_default(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_cell_magic("distrain", "--nodes 2 --dry-run --name pm-flag --post-mortem", "1")
    assert capsys.readouterr().out.count("DISTRAIN_POST_MORTEM=1") == 2  # both nodes
    shell.run_line_magic("distrain_config", "post_mortem=1")
    try:
        shell.run_cell_magic("distrain", "--dry-run --name pm-config", "1")
        assert "DISTRAIN_POST_MORTEM=1" in capsys.readouterr().out
    finally:
        shell.run_line_magic("distrain_config", "post_mortem=0")
    shell.run_cell_magic("distrain", "--dry-run --name pm-none", "1")
    assert "DISTRAIN_POST_MORTEM" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("", "the following arguments are required: name"),
        ("no-such-job", "%distrain_debug no-such-job:"),
        ("dbg-magic --rank 9", "--rank 9: job dbg-magic has ranks 0 to 3"),
        ("dbg-magic --rank 0", "rank 0 of job dbg-magic is not paused (paused ranks: 1, 3)"),
        ("dbg-magic --rank one", "invalid int value"),
        ("dbg-magic --pause --rank 9", "--pause: rank 9: job dbg-magic has ranks 0 to 3"),
    ],
)
@pytest.mark.slow
def test_bad_debug_lines_are_usage_errors(
    shell: InteractiveShell, paused_job: Job, line: str, needle: str
) -> None:
    with pytest.raises(UsageError) as info:
        shell.run_line_magic("distrain_debug", line)
    assert needle in str(info.value)


@pytest.mark.slow
def test_a_job_attached_to_from_elsewhere_is_debugged_with_its_stored_key(
    paused_job: Job,
) -> None:
    elsewhere = jobs.JobService()  # another kernel's service: no plan, the key from the job dir
    job = elsewhere.attach("dbg-magic", "local", keep=False)
    try:
        assert job.plan is None
        wait_for(lambda: len(job.paused()) == 2, 30, "the attached job shows no paused ranks")
        assert job.debug(3).send("p batch") == "{'idx': 8126}\n"
    finally:
        job.debug(3).close()
        if job.submission is not None:
            job.submission.detach()


@pytest.mark.slow
def test_the_console_shows_the_frame_sends_commands_and_casts(
    shell: InteractiveShell, paused_job: Job
) -> None:
    console = shell.run_line_magic("distrain_debug", "dbg-magic --rank 1")
    assert isinstance(console, DebugConsole)
    assert [label for label, _ in console.ranks.options] == [
        "rank 1",
        "rank 3",
        "all paused ranks",
    ]
    assert "rank 1 at cell:6 in <module>" in unescape(console.where.value)
    current = unescape(console.source.value).split("dd-current'>")[1].split("</span>")[0]
    assert current == '    6 ->     batch["idx"] += 1'
    console.line.value = "p batch"  # Enter in the input line
    wait_for(lambda: "{'idx': 8124}" in answers(console), 30, answers(console))
    assert console.line.value == ""

    console.ranks.value = 3
    assert "rank 3 at cell:8 in <module> after KeyError: 'missing'" in unescape(console.where.value)
    console.submit("p batch['idx']").join(30)
    assert "(Pdb) p batch['idx']\n8126" in answers(console)

    console.ranks.value = ALL
    console.submit("p rank").join(30)
    assert "<b>rank 1</b> (Pdb) p rank\n1" in answers(console)
    assert "<b>rank 3</b> (Pdb) p rank\n3" in answers(console)

    console.ranks.value = 1
    console.continue_button.click()
    wait_for(lambda: [p.rank for p in paused_job.paused()] == [3], 30, "rank 1 did not resume")
    wait_for(lambda: console.ranks.options == (("rank 3", 3),), 30, str(console.ranks.options))


@pytest.mark.slow
def test_debug_last_enters_a_sessions_last_failed_cell(shell: InteractiveShell) -> None:
    with pytest.raises(UsageError, match="'no-session' is not a session of this kernel"):
        shell.run_line_magic("distrain_debug", "no-session --last")
    service = jobs.default_service()
    session = service.start_session(JobSpec("dbg-sess", nodes=1, nproc=2))
    try:
        session.run("import torch.distributed as dist\nrank = dist.get_rank()")
        with pytest.raises(UsageError, match="no cell of session dbg-sess has failed"):
            shell.run_line_magic("distrain_debug", "dbg-sess --last")
        with pytest.raises(KeyError):
            session.run("batch = {'idx': 40 + rank}\nif rank == 1:\n    batch['nope']")
        console = shell.run_line_magic("distrain_debug", "dbg-sess --last")
        job = session.job
        assert job is not None
        [paused] = job.paused()
        assert (paused.rank, paused.line, paused.exception) == (1, 3, "KeyError: 'nope'")
        assert "rank 1 at cell:3 in <module> after KeyError: 'nope'" in unescape(
            console.where.value
        )
        assert job.debug(1).send("p batch") == "{'idx': 41}\n"
        job.debug(1).cont()

        def next_cell() -> list[object] | None:
            try:
                return [session.run("rank * 10")]
            except SessionError:  # the --last cell is still ending
                return None

        assert wait_for(next_cell, 30, "the session runs no cell") == [0]
    finally:
        service.stop_session("dbg-sess")


def test_panel_needs_a_rank_and_a_kernel_debugger(shell: InteractiveShell) -> None:
    with pytest.raises(UsageError, match="--panel shows one rank: add --rank R"):
        shell.run_line_magic("distrain_debug", "some-job --panel")
    with pytest.raises(UsageError, match="this kernel has no Debugger panel"):
        shell.run_line_magic("distrain_debug", "some-job --rank 1 --panel")
