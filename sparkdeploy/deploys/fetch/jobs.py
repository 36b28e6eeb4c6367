"""
Moving bytes onto the Spark: the engine image and the model folders, each fetched by a
Spark-side systemd job (``spark-fetch@ID.service``) that outlives the deploy's SSH session.
The deploy starts the jobs that are not done (or finds them running and attaches), then
watches them from the laptop with progress, bounded, and reports a failed one with its last
lines; the next run retries it from where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
import secrets
import time
from dataclasses import dataclass, field, replace
from io import StringIO
from typing import Any

import gevent
from pyinfra import host, logger
from pyinfra.api import FunctionCommand, Host, OperationError, StringCommand, deploy, operation
from pyinfra.operations import systemd

from sparkdeploy.config.paths import (
    FETCH_BIN,
    FETCH_JOBS,
    FETCH_LIB,
    FETCH_MODULES,
    FETCH_UNIT,
    HF_CLI_VENV,
    IMAGE_READINGS,
    MODEL_CHECK_BIN,
)
from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.config.topology import Place
from sparkdeploy.deploys.fetch.board import Board
from sparkdeploy.deploys.fetch.progress import (
    failure_text,
    finished_line,
    job_line,
    progress_line,
)
from sparkdeploy.deploys.fetch.spec import (
    CopyImageSpec,
    CopyModelSpec,
    ImageSpec,
    JobSpec,
    ModelSpec,
    ServeSpec,
)
from sparkdeploy.deploys.managed import UPLOAD_DIR, managed_file
from sparkdeploy.engine_plan.plan import EnginePlan
from sparkdeploy.escape import shell
from sparkdeploy.facts.host_state import HostState, host_state
from sparkdeploy.knowledge.images import reading_script
from sparkdeploy.render import file_text
from sparkdeploy.reports.failures import expected

POLL_EVERY = 2.0  # seconds between two looks at the jobs (one SSH round trip each)
# The head serves the copies on this TCP port of its fabric address: away from the engines'
# API ports (8000, 30000) and the ports their NCCL, Gloo and Ray use (29500+, 6379).
PAIR_COPY_PORT = 47471


@dataclass(frozen=True)
class FetchJob:
    """One thing to bring onto the Spark, and the spec its job reads (files/fetch_spec.py)."""

    id: str  # the instance of spark-fetch@.service: kind, a readable slug, a digest
    typed: JobSpec = field(hash=False, compare=False)
    # The copy channel's secret (``copy_token``): written root-only beside the spec over SSH
    # (``upload_tokens``), never in the spec, a command line or the output.
    token: str = field(default="", hash=False, compare=False, repr=False)

    @classmethod
    def of(cls, name: str, spec: JobSpec) -> FetchJob:
        """The job of ``spec`` for ``name`` (what makes its ID, with the spec's kind)."""
        return cls(job_id(spec.kind, name), spec)

    @property
    def kind(self) -> str:  # model | image | copy-model | copy-image | serve
        return self.typed.kind

    @property
    def label(self) -> str:  # what the laptop calls it
        return self.typed.label

    @property
    def spec(self) -> dict[str, Any]:
        """The spec as spark-fetch reads it (JOBS/ID.json)."""
        return self.typed.to_dict()

    @property
    def unit(self) -> str:
        return f"spark-fetch@{self.id}.service"

    @property
    def key(self) -> str:
        """What it brings, the same on every Spark: repo@revision, or the image."""
        spec = self.typed
        if isinstance(spec, ModelSpec):
            return spec.want
        return spec.image if isinstance(spec, ImageSpec) else ""

    def done(self, state: HostState) -> bool:
        """Whether the host-state fact already shows the work done (a server never is)."""
        spec = self.typed
        if isinstance(spec, ModelSpec):
            return bool(state.models.get(spec.folder, {}).get("complete"))
        if isinstance(spec, ImageSpec):
            reading = state.image_reading or {}
            return bool(state.image_id) and reading.get("engine") == spec.engine
        return False


def job_id(kind: str, name: str) -> str:
    """``model-mistral-small-4-119b-2603-nvfp4-1a2b3c4d``: a unit instance name (letters,
    digits and ``-`` only) that says what it fetches and is unique to it."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower().rsplit("/", 1)[-1]).strip("-")[:40]
    return f"{kind}-{slug}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def hf_env(spark: SparkSettings) -> dict[str, str]:
    """The environment of hf commands: the settings login shells get (hf-profile.sh.j2)."""
    env = {"HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_UPDATE_CHECK": "1"}
    if spark.hf_disable_xet:
        env["HF_HUB_DISABLE_XET"] = "1"
    if spark.hf_endpoint:
        env["HF_ENDPOINT"] = str(spark.hf_endpoint)
    return env


def model_jobs(spark: SparkSettings, group: str) -> list[FetchJob]:
    """A job per model folder of the Spark (the model, the draft)."""
    jobs = []
    for folder, want, needs_tokenizer in spark.model_folders():
        repo, revision = want.rsplit("@", 1)
        spec = ModelSpec(
            label=f"model {repo}",
            repo=repo,
            revision=revision,
            want=want,
            folder=folder,
            needs_tokenizer=needs_tokenizer,
            base_repo=spark.model_base_repo if needs_tokenizer else None,
            user=spark.user,
            group=group,
            env=hf_env(spark),
            hf_venv=HF_CLI_VENV,
            model_check=MODEL_CHECK_BIN,
        )
        jobs.append(FetchJob.of(folder, spec))
    return jobs


def image_job(plan: EnginePlan, home: str = "", user: str = "") -> FetchJob:
    """The job that pulls the engine image (when it is not there) and reads it; the pull
    uses the registry logins (``auths`` only) of the operator (``user``, whose ``home`` it
    is), who runs `docker login`: the job copies them into a private config of root's, and
    reads theirs only when it is a regular file they own."""
    spec = ImageSpec(
        label=f"image {plan.image}",
        image=plan.image,
        engine=plan.engine,
        read_script=reading_script(plan.engine),
        readings=IMAGE_READINGS,
        docker_config=f"{home}/.docker" if home else "",
        user=user,
    )
    return FetchJob.of(plan.image, spec)


@dataclass(frozen=True)
class CopyLink:
    """One channel of the copies: ``head``'s server (the head; in a ring of four also the
    Spark that passes the copies on) listens on its address ``head_ip`` and answers the
    ``others``' addresses ``other_ips`` only. A pair and a switch have one, over rail 1."""

    head: str  # the serving Spark's name
    head_ip: str
    other_ips: tuple[str, ...]  # every Spark that copies over it, its address, in rank order
    others: tuple[str, ...]  # their names, in the same order


@dataclass(frozen=True)
class CopyRoutes:
    """How one Spark takes part in the copies: the channel it copies over (None on the
    head, which fetches from the internet) and those it serves."""

    head: str  # the Spark that fetches from the internet
    source: CopyLink | None
    serves: tuple[CopyLink, ...]


def copy_link(place: Place) -> CopyLink | None:
    """Rail 1 of every Spark, seen from any of them (None: alone, or no QSFP rails to copy
    over). A pair and three to eight Sparks through a switch alike."""
    if not place.linked or len(place.members) != place.nodes:
        return None
    names = [end.name for end in place.rails[0].ends]  # the others, in rank order
    names.insert(place.rank, place.name)
    # members and names are in rank order, the head first
    return CopyLink(place.head, place.head_ip, place.members[1:], tuple(names[1:]))


def ring_links(place: Place) -> tuple[CopyLink, ...]:
    """
    The copy channels of a ring, each over the first logical link of one cable: every
    Spark copies from its neighbour nearer the head, the head's two neighbours from the
    head, and on four Sparks the one opposite the head from the head's port-0 neighbour,
    which passes on what it copied. Each byte crosses each cable once; nothing goes
    through a Spark's kernel routing (a ring has no routes between non-neighbours).
    """
    cables, links = place.cables, []
    for rank in range(1, len(cables)):
        if rank <= len(cables) // 2:  # forward: cable `rank`, port 0 of rank-1 to port 1 of rank
            cable = cables[rank - 1]
            near, far = cable.links[0].a, cable.links[0].b
            links.append(CopyLink(cable.a, near.ip, (far.ip,), (cable.b,)))
        else:  # backward: cable rank+1, port 0 of rank to port 1 of rank+1
            cable = cables[rank]
            near, far = cable.links[0].b, cable.links[0].a
            links.append(CopyLink(cable.b, near.ip, (far.ip,), (cable.a,)))
    return tuple(links)


def copy_routes(place: Place) -> CopyRoutes | None:
    """This Spark's part in the copies (None: alone, or no QSFP rails to copy over)."""
    if place.ringed:
        links = ring_links(place)
        source = next((link for link in links if place.name in link.others), None)
        serves = tuple(link for link in links if link.head == place.name)
        return CopyRoutes(place.head, source, serves)
    link = copy_link(place)
    if link is None:
        return None
    if place.name == link.head:
        return CopyRoutes(link.head, None, (link,))
    return CopyRoutes(link.head, link, ())


_TOKENS: dict[str, str] = {}


def copy_token(head: str) -> str:
    """The copy channel's secret of this run for the Sparks of ``head``: random, made once
    per deploy run, the same for every server and copy of those Sparks (issue 22: anyone
    on a server's address must not be able to serve or read the copies)."""
    return _TOKENS.setdefault(head, secrets.token_urlsafe(32))


def copy_job(job: FetchJob, link: CopyLink, wait: int, origin: str = "") -> FetchJob:
    """The other Spark's job for ``job``: copy it from the server of ``link`` once that
    has it (waiting ``wait`` seconds at most), with the token of ``origin``'s Sparks (the
    head; default the server). Its spec gets what it checks the copy against when the
    deploy has read it from the server over SSH (``with_digests``)."""
    kind = CopyModelSpec if isinstance(job.typed, ModelSpec) else CopyImageSpec
    values = {**job.spec, "label": f"{job.label} (from {link.head})"}
    values.pop("kind")
    spec = kind(**values, source=link.head_ip, port=PAIR_COPY_PORT, wait_limit=wait)
    return replace(FetchJob.of(job.key, spec), token=copy_token(origin or link.head))


def serve_job(jobs: list[FetchJob], link: CopyLink, origin: str = "") -> FetchJob:
    """A server of the copies: exactly these folders and images, answering the addresses
    of the link's other Sparks only, with the token of ``origin``'s Sparks (default the
    server's)."""
    many = "s" if len(link.other_ips) > 1 else ""
    return replace(_serve_job(jobs, link, many), token=copy_token(origin or link.head))


def _serve_job(jobs: list[FetchJob], link: CopyLink, many: str) -> FetchJob:
    spec = ServeSpec(
        label=f"copies for the other Spark{many} ({', '.join(link.other_ips)})",
        bind=link.head_ip,
        allow=list(link.other_ips),
        port=PAIR_COPY_PORT,
        models={model.want: model.folder for job in jobs if (model := model_spec(job))},
        images=[job.key for job in jobs if job.kind == "image"],
    )
    return FetchJob.of(link.head_ip, spec)


def start_command(jobs: list[FetchJob]) -> str:
    """Write each job's spec and start its unit unless it is running (then it is attached
    to): its old status goes first, so a finished job of an earlier run is not read as this
    one's."""
    lines = [f"install -d -m 755 {FETCH_JOBS}"]
    for job in jobs:
        spec = f"{FETCH_JOBS}/{job.id}.json"
        lines += [
            f"printf '%s\\n' {shell(job.typed.to_json())} > {spec}.tmp",
            f"mv -f {spec}.tmp {spec}",
            f"systemctl is-active -q {job.unit} || {{ rm -f {FETCH_JOBS}/{job.id}.status.json;"
            f" systemctl reset-failed {job.unit} 2>/dev/null || true;"
            f" systemctl start {job.unit}; }}",
        ]
    return "set -e\n" + "\n".join(lines)


def read_statuses(host_, jobs: list[FetchJob]) -> list[dict[str, Any]]:
    command = StringCommand(FETCH_BIN, "status", *(job.id for job in jobs))
    ok, output = host_.run_shell_command(command, _sudo=True)
    if not ok:
        raise OperationError(f"{FETCH_BIN} status failed: {output.stderr}")
    return [json.loads(line) for line in output.stdout.splitlines() if line.startswith("{")]


def upload_tokens(host_, jobs: list[FetchJob], ssh_home: str) -> None:
    """Each token of ``jobs`` into a root-only (0700) folder beside the specs, where
    spark-fetch reads it (``token_file``): uploaded through the SSH user's private 0700
    folder, as the managed secrets are, so it is never on a command line or shown."""
    tokened = [job for job in jobs if job.token]
    if not tokened:
        return
    staging = posixpath.join(ssh_home, UPLOAD_DIR)
    private = f"{FETCH_JOBS}/private"
    prepare = StringCommand(
        f"install -d -m 755 {FETCH_JOBS} && install -d -m 700 {private} && "
        f'install -d -m 700 -o "${{SUDO_USER:-root}}" {shell(staging)}'
    )
    ok, output = host_.run_shell_command(prepare, _sudo=True)
    for job in tokened if ok else ():
        ok = host_.put_file(
            StringIO(job.token + "\n"),
            f"{private}/{job.id}.token",
            remote_temp_filename=posixpath.join(staging, f"{job.id}.token"),
            _sudo=True,
        )
    if not ok:
        raise OperationError(f"could not write the copy token in {private}: {output.stderr}")


def head_queries(head_host, jobs: list[FetchJob]) -> list[dict[str, str]]:
    """What ``spark-fetch digests`` is asked on the head: the head's own folder of each
    model (its inventory may place it elsewhere), each image."""
    folders = {model.want: model.folder for job in jobs_of(head_host) if (model := model_spec(job))}
    return [
        {"want": job.key, "folder": folders.get(job.key, model.folder)}
        if (model := model_spec(job))
        else {"image": job.key}
        for job in jobs
    ]


def with_digests(head_host, jobs: list[FetchJob]) -> list[FetchJob]:
    """Those copy ``jobs`` whose thing the head has whole, each with what its copy is
    checked against, read from the head over SSH (never over the copy channel, which
    anyone on the fabric may answer): every file's size and sha256 (``files``), or the
    image's ID (``image_id``)."""
    queries = shell(json.dumps(head_queries(head_host, jobs)))
    ok, output = head_host.run_shell_command(
        StringCommand(FETCH_BIN, "digests", queries), _sudo=True
    )
    if not ok:
        raise OperationError(f"{head_host.name}: {FETCH_BIN} digests failed: {output.stderr}")
    answers = json.loads((output.stdout.strip().splitlines() or ["[]"])[-1])
    ready = []
    for job, answer in zip(jobs, answers, strict=True):
        if answer.get("ready"):
            ready.append(replace(job, typed=checked(job.typed, answer)))
    return ready


def checked(spec: JobSpec, answer: dict[str, Any]) -> JobSpec:
    """A copy's spec with what its copy is checked against: the head's ``answer`` to
    ``spark-fetch digests`` (the files' sizes and sha256, or the image's ID)."""
    if isinstance(spec, CopyModelSpec):
        return replace(spec, files=answer["files"])
    if isinstance(spec, CopyImageSpec):
        return replace(spec, image_id=answer["id"])
    return spec


def model_spec(job: FetchJob) -> ModelSpec | None:
    """The job's spec when it brings a model folder (fetched or copied)."""
    return job.typed if isinstance(job.typed, ModelSpec) else None


def start_jobs(host_, jobs: list[FetchJob], ssh_home: str) -> None:
    if not jobs:
        return
    upload_tokens(host_, jobs, ssh_home)
    ok, output = host_.run_shell_command(StringCommand(start_command(jobs)), _sudo=True)
    if not ok:
        raise OperationError(f"could not start the fetch jobs: {output.stderr or output.stdout}")


def report_earlier(host_, jobs: list[FetchJob]) -> None:
    """What an earlier run left: jobs still running (attached to), and failures (retried)."""
    units = {job.id: job.unit for job in jobs}
    for status in read_statuses(host_, jobs) if jobs else ():
        if status["unit"] in ("active", "activating"):
            logger.info(
                f"{host_.print_prefix}attaching to {units[status['id']]}, still running: "
                f"{job_line(status, False)}"
            )
        elif status.get("state") == "failed":
            logger.warning(
                f"{host_.print_prefix}the last attempt: "
                f"{failure_text(status, units[status['id']])}\n  retrying now"
            )


class Copies:
    """The copies of a Spark not started yet: each starts once the deploy has read, from
    the head over SSH, what it is checked against."""

    def __init__(self, state, host_, jobs: list[FetchJob], head: str, ssh_home: str):
        self.state, self.host, self.head, self.ssh_home = state, host_, head, ssh_home
        self.waiting = [job for job in jobs if job.kind.startswith("copy-")]

    def start_ready(self) -> list[FetchJob]:
        if not self.waiting:
            return []
        ready = with_digests(self.state.inventory.get_host(self.head), self.waiting)
        start_jobs(self.host, ready, self.ssh_home)
        started = {job.id for job in ready}
        self.waiting = [job for job in self.waiting if job.id not in started]
        return ready

    def statuses(self) -> list[dict[str, Any]]:
        return [
            {"id": job.id, "label": job.label, "state": "running", "phase": "waiting",
             "unit": "inactive"}
            for job in self.waiting
        ]  # fmt: skip


@expected("fetch", then=("journalctl -u 'spark-fetch@*' -n 100   (on the Spark)",))
def _fetch(
    state,
    host,
    jobs: list[FetchJob],
    timeout: int,
    serving: list[FetchJob],
    head: str = "",
    ssh_home: str = "",
) -> None:
    """Report what an earlier run left, start or attach, then watch until every job is done
    (or one fails, or the wait ends: the jobs go on, the next run attaches). ``serving``
    jobs are started, not watched; a copy starts once its digests are read from the
    ``head`` over SSH, and stops waiting when the head failed."""
    report_earlier(host, jobs)
    copies = Copies(state, host, jobs, head, ssh_home)
    started = [job for job in jobs if job not in copies.waiting]
    start_jobs(host, [*serving, *started], ssh_home)
    if jobs:
        watch_jobs(state, host, jobs, timeout, copies, started, head)


def watch_jobs(
    state,
    host,
    jobs: list[FetchJob],
    timeout: int,
    copies: Copies,
    started: list[FetchJob],
    head: str,
) -> None:
    """Look at the jobs every POLL_EVERY seconds, showing their progress on the run's board
    (one block for every Spark on a terminal, a line a minute elsewhere), until all are done;
    starting the copies as the head has them whole. A failed job, a failed head or the end
    of the wait raises, and takes the Spark off the board first."""
    units = {job.id: job.unit for job in jobs}
    deadline = time.monotonic() + timeout
    board = Board.of(state)

    def emit(line: str) -> None:
        logger.info(f"{host.print_prefix}{line}")

    try:
        while True:
            gevent.sleep(POLL_EVERY)
            stop_if_head_failed(state, head)
            started += copies.start_ready()
            statuses = look(host, started, copies, units)
            running = [s for s in statuses if s.get("state") != "done"]
            if not running:
                break
            if time.monotonic() > deadline:
                raise OperationError(still_fetching(running, units, timeout))
            board.show(host.name, running, emit, time.monotonic())
    finally:
        board.drop(host.name)
    for status in statuses:
        logger.info(f"{host.print_prefix}{finished_line(status)}")


def stop_if_head_failed(state, head: str) -> None:
    """A copy waits no more for a head that failed in this run."""
    if head and any(failed.name == head for failed in state.failed_hosts):
        raise OperationError(
            f"{head}, which fetches what this Spark copies, failed: see its error; the "
            f"copies wait for it on this Spark (journalctl -u spark-fetch@*)"
        )


def look(host, started: list[FetchJob], copies: Copies, units: dict[str, str]) -> list[dict]:
    """Every job's status (the copies not started yet: waiting); a failed one ends it."""
    statuses = [*(read_statuses(host, started) if started else []), *copies.statuses()]
    for status in statuses:  # stopped before it could write a status
        if status.get("state") == "none" and status["unit"] not in ("active", "activating"):
            status.update(state="failed", error=f"{units[status['id']]} did not start")
    failed = [s for s in statuses if s.get("state") == "failed"]
    if failed:
        raise OperationError(
            "\n".join(failure_text(status, units[status["id"]]) for status in failed)
        )
    return statuses


def still_fetching(running: list[dict], units: dict[str, str], timeout: int) -> str:
    """The wait is over, the jobs go on: how to follow them."""
    follow = " ".join(f"-u {units[s['id']]}" for s in running)
    return (
        f"still fetching after {timeout} s (fetch_timeout): "
        f"{progress_line(running, False)}\n  the jobs go on on the Spark; follow them "
        f"with `journalctl -f {follow}` and run the deploy again to attach"
    )


@operation()
def fetched(
    jobs: list[FetchJob],
    timeout: int = 21600,
    serving: list[FetchJob] | None = None,
    head: str = "",
):
    """
    Bring the images and model folders of ``jobs`` onto the Spark: start a Spark-side job
    (``spark-fetch@ID.service``) for each one not there yet, or attach to it when it is
    already running, and wait, showing progress, until all are done.

    + jobs: what to fetch (``model_jobs``, ``image_job``) or copy from the head
      (``copy_job``)
    + timeout: seconds to wait; the jobs go on after it, and the next run attaches
    + serving: the head's server of the other Spark's copies: started, not waited for
    + head: the Spark a copy comes from; the wait ends when that Spark failed

    **Example:**

    .. code:: python

        fetch.fetched(jobs=[image_job(plan), *model_jobs(spark, "nvidia")])
    """
    state = host_state()
    missing = [job for job in jobs if not job.done(state)]
    if not missing and not serving:
        host.noop("every image and model folder is on the Spark")
        return
    arguments = (missing, timeout, list(serving or ()), head)
    yield FunctionCommand(_fetch, arguments, {"ssh_home": state.ssh_home})


@operation()
def serving_stopped(jobs: list[FetchJob] | None = None):
    """
    Stop this Spark's servers of the copies: every Spark has finished its copies when
    this operation runs (after ``fetched`` on all of them).

    + jobs: the ``serve_job``s this Spark started in this run (none: nothing to stop)

    **Example:**

    .. code:: python

        fetch.serving_stopped(jobs=[serve_job(jobs, link)])
    """
    if not jobs:
        host.noop("no copy was served in this run")
        return
    for job in jobs:
        yield f"systemctl stop {job.unit}"


def jobs_of(target: Host, group: str = "", home: str = "") -> list[FetchJob]:
    """What a Spark must have: its engine image and its model folders (``group`` owns them,
    ``home`` is the operator's)."""
    plan: EnginePlan | None = target.data.get("engine_plan")
    spark: SparkSettings = target.data.spark
    images = [image_job(plan, home, spark.user)] if plan else []
    return [*images, *model_jobs(spark, group)]


def fetch_plan(jobs: list[FetchJob]) -> dict[str, Any]:
    """The ``fetched`` arguments of the current Spark. Alone, it fetches everything. Linked
    over QSFP, the head fetches from the internet; every other Spark copies what the head
    has from its source (a pair or a switch: the head, over rail 1; a ring: its neighbour
    nearer the head, ``ring_links``) and fetches the rest; each server serves what any of
    its link's Sparks lacks."""
    routes = copy_routes(host.data.place)
    if routes is None:
        return {"jobs": jobs}
    head_keys = {job.key for job in jobs_of(host.inventory.get_host(routes.head))}
    arguments: dict[str, Any] = {"jobs": jobs}
    if routes.source is not None:
        wait = host.data.spark.fetch_timeout
        arguments["jobs"] = [
            copy_job(job, routes.source, wait, routes.head) if job.key in head_keys else job
            for job in jobs
        ]
        arguments["head"] = routes.source.head
    if routes.serves:
        servers = (served(jobs, link, head_keys, routes.head) for link in routes.serves)
        arguments["serving"] = [server for server in servers if server is not None]
    return arguments


def served(
    jobs: list[FetchJob], link: CopyLink, head_keys: set[str], origin: str
) -> FetchJob | None:
    """The server of ``link``: what the head has and any of the link's Sparks lacks (None
    when they lack nothing)."""
    lacking: set[str] = set()
    for name in link.others:
        other = host.inventory.get_host(name)
        other_state = host_state(other)
        lacking |= {job.key for job in jobs_of(other) if not job.done(other_state)}
    offered = [job for job in jobs if job.key in lacking and job.key in head_keys]
    return serve_job(offered, link, origin) if offered else None


@deploy("Fetch the engine image and the model folders")
def fetch_everything() -> None:
    spark: SparkSettings = host.data.spark
    managed_file(
        name="Install spark-model-check", path=MODEL_CHECK_BIN, content=file_text("model_check.py")
    )
    for module in FETCH_MODULES:  # its job specs and its parts (files/fetch_job.py says)
        managed_file(
            name=f"Install spark-fetch's module {module}",
            path=f"{FETCH_LIB}/{module}.py",
            content=file_text(f"{module}.py"),
        )
    managed_file(name="Install spark-fetch", path=FETCH_BIN, content=file_text("fetch_job.py"))
    unit = managed_file(
        name="Install spark-fetch@.service",
        path=FETCH_UNIT,
        content=file_text("spark-fetch@.service"),
    )
    systemd.daemon_reload(name="Reload systemd units", _if=unit.did_change)
    state = host_state()
    arguments = fetch_plan(jobs_of(host, state.user_group, state.user_home))
    # One operation for every Spark, so that the head fetches while the other copies.
    fetched(
        name="Fetch the engine image and the model folders (once for all the Sparks)",
        timeout=spark.fetch_timeout,
        **arguments,
    )
    serving_stopped(
        name="Stop serving the copies for the other Sparks",
        jobs=arguments.get("serving") or [],
    )
