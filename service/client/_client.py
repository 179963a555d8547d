"""`TrainingClient`: submit, watch and stop training runs through Ray's Jobs API.

A person needs only the dashboard address and the token: everything the client reports
comes from job info and job logs, never from a filesystem shared with the cluster.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Literal, overload
from urllib.parse import urlsplit

from service.client._follow import follow
from service.client.auth import Token, resolve_token
from service.client.errors import ClientError, RunTimeout, UnknownRun
from service.client.states import RunInfo, RunState, RunStatus, status_from_job, timestamp
from service.client.submission import (
    SERVICE_TAG,
    build_submission,
    check_entrypoint_resources,
    resume_submission,
)

if TYPE_CHECKING:
    from service.client._jobs import JobsApi

DEFAULT_ADDRESS = "http://127.0.0.1:8265"
MAX_POLL_S = 10.0  # wait() backs off to at most this interval between polls


def normalize_address(address: str) -> str:
    """The dashboard URL with a scheme and no trailing slash; ValueError for anything else."""
    address = str(address).strip()
    if "://" not in address:
        address = "http://" + address
    parts = urlsplit(address)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"address {address!r} is not allowed: give the Ray dashboard URL, e.g. {DEFAULT_ADDRESS} "
            "(not a ray:// client address or the GCS port)"
        )
    return address.rstrip("/")


class TrainingClient:
    """Drive training runs on a Ray cluster known by its dashboard address and auth token.

    `token` wins over `RAY_AUTH_TOKEN`, `RAY_AUTH_TOKEN_PATH` and `~/.ray/auth_token`
    (see `service.client.auth`); `timeout_s` bounds every HTTP request. Nothing is sent
    until the first call. Errors are `service.client.errors.ClientError`s.
    """

    def __init__(self, address: str = DEFAULT_ADDRESS, *, token: str | None = None, timeout_s: float = 30.0):
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s!r}")
        self.address = normalize_address(address)
        self.timeout_s = float(timeout_s)
        self._token: Token | None = resolve_token(token)
        self._jobs: JobsApi | None = None

    def __repr__(self) -> str:
        origin = self._token.origin if self._token else "no token"
        return f"TrainingClient({self.address!r}, token from {origin})"

    def _errors(self, run_id: str | None = None):
        from service.client._jobs import translate_errors  # Ray loads only once a request is made

        return translate_errors(self.address, self._token, run_id)

    def _api(self) -> JobsApi:
        if self._jobs is None:
            from service.client._jobs import JobsApi

            with self._errors():
                self._jobs = JobsApi(self.address, token=self._token, timeout_s=self.timeout_s)
        return self._jobs

    def _job_info(self, run_id: str):
        api = self._api()
        with self._errors(run_id):
            return api.get_job_info(run_id)

    def submit(
        self,
        *,
        preset: str | None = None,
        config_file: str | os.PathLike | None = None,
        overrides: Sequence[str] = (),
        entrypoint_num_cpus: float | None = None,
        entrypoint_num_gpus: float | None = None,
        run_id: str | None = None,
        run_dir: str | os.PathLike | None = None,
        working_dir: str | os.PathLike | None = ".",
        env_vars: Mapping[str, str] | None = None,
    ) -> str:
        """Start `python -m service.train` as a Ray job; returns its run id.

        The working dir (default: the current one, the repository root) is uploaded without
        run outputs, weights or `.git`; `working_dir=None` uploads nothing (the cluster's image
        has the code). `run_dir` is a path on the cluster. Submitting a `run_id` that exists
        returns it and leaves that run alone.
        """
        check_entrypoint_resources(num_cpus=entrypoint_num_cpus, num_gpus=entrypoint_num_gpus)
        submission = build_submission(
            run_id=run_id,
            preset=preset,
            config_file=config_file,
            overrides=overrides,
            run_dir=run_dir,
            working_dir=working_dir,
            env_vars=env_vars,
        )
        if run_id is not None and self._existing_run(run_id):
            return run_id  # checked first so a repeat neither uploads nor submits anything
        api = self._api()
        try:
            with self._errors():
                return _submit_job(api, submission, entrypoint_num_cpus, entrypoint_num_gpus)
        except ClientError as error:
            # Two submitters raced for the same id: Ray accepted one, the other is that run.
            if "already exists" in str(error.__cause__) and self._existing_run(submission.run_id):
                return submission.run_id
            raise

    def resume(
        self,
        run_id: str,
        *,
        overrides: Sequence[str] = (),
        config_file: str | os.PathLike | None = None,
        run_dir: str | os.PathLike | None = None,
        working_dir: str | os.PathLike | None = ".",
        env_vars: Mapping[str, str] | None = None,
        entrypoint_num_cpus: float | None = None,
        entrypoint_num_gpus: float | None = None,
    ) -> str:
        """Continue a stopped or failed run from its latest checkpoint, as a new job; returns its id
        (`<run_id>.resume<n>`: watch that one). The run must have ended; `overrides` go on top of its
        saved config (e.g. `grpo.steps=200`). The run directory must be where the run left it: the
        same `run_dir` / `run.storage_path`, on storage the new job sees."""
        check_entrypoint_resources(num_cpus=entrypoint_num_cpus, num_gpus=entrypoint_num_gpus)
        if not self._existing_run(run_id):
            raise UnknownRun(run_id, self.address)
        state = self.status(run_id).state
        if not state.is_terminal():
            raise ClientError(
                f"run {run_id!r} is still {state.value} on {self.address}: stop it before resuming"
            )
        api = self._api()
        with self._errors():
            taken = {job.submission_id for job in api.list_jobs()}
        job_id = next(
            f"{run_id}.resume{n}" for n in range(1, len(taken) + 2) if f"{run_id}.resume{n}" not in taken
        )
        submission = resume_submission(
            run_id=run_id, job_id=job_id, overrides=overrides, config_file=config_file,
            run_dir=run_dir, working_dir=working_dir, env_vars=env_vars,
        )  # fmt: skip
        with self._errors():
            return _submit_job(api, submission, entrypoint_num_cpus, entrypoint_num_gpus)

    def _existing_run(self, run_id: str) -> bool:
        """True if `run_id` is one of this service's runs; raises if a foreign job holds the id."""
        try:
            info = self._job_info(run_id)
        except UnknownRun:
            return False
        if (info.metadata or {}).get("service") != SERVICE_TAG:
            raise ClientError(
                f"run id {run_id!r} is taken on {self.address} by a Ray job that is not a training run"
            )
        return True

    def status(self, run_id: str) -> RunStatus:
        """The run's state, phase, step, latest metrics, ETA and, if it failed, why."""
        info = self._job_info(run_id)
        with self._errors(run_id):
            logs = self._api().get_job_logs(run_id)
        return status_from_job(
            run_id,
            info.status,
            info.message,
            logs,
            start_time_ms=info.start_time,
            end_time_ms=info.end_time,
        )

    def wait(self, run_id: str, *, timeout_s: float, poll_s: float = 1.0) -> RunStatus:
        """Poll until the run ends and return its final status; raises RunTimeout after `timeout_s`.

        The interval starts at `poll_s` and grows by half each poll, up to 10 s.
        """
        if not timeout_s > 0 or not poll_s > 0:
            raise ValueError(f"timeout_s and poll_s must be > 0 seconds, got {timeout_s!r} and {poll_s!r}")
        deadline = time.monotonic() + timeout_s
        interval = poll_s
        while True:
            status = self.status(run_id)
            remaining = deadline - time.monotonic()
            if status.state.is_terminal():
                return status
            if remaining <= 0:
                raise RunTimeout(run_id, timeout_s, status)
            time.sleep(min(interval, remaining))
            interval = min(interval * 1.5, max(MAX_POLL_S, poll_s))

    @overload
    def logs(self, run_id: str, *, follow: Literal[False] = False) -> str: ...
    @overload
    def logs(self, run_id: str, *, follow: Literal[True]) -> Iterator[str]: ...

    def logs(self, run_id: str, *, follow: bool = False) -> str | Iterator[str]:
        """The run's log so far, or with `follow=True` an iterator of chunks until the run ends."""
        if follow:
            self._job_info(run_id)  # an unknown run fails here, not at the first next()
            return self._follow_logs(run_id)
        api = self._api()
        with self._errors(run_id):
            return api.get_job_logs(run_id)

    def _follow_logs(self, run_id: str) -> Iterator[str]:
        api = self._api()
        with self._errors(run_id):
            yield from follow(lambda: api.tail_job_logs(run_id))

    def stop(self, run_id: str) -> bool:
        """Ask the run to stop (it checkpoints first); True if it was still going.

        Returns at once: `wait()` for its final status (STOPPED).
        """
        api = self._api()
        with self._errors(run_id):
            return api.stop_job(run_id)

    def list(self) -> list[RunInfo]:
        """This service's runs on the cluster (jobs tagged by `submit`), oldest first."""
        api = self._api()
        with self._errors():
            jobs = api.list_jobs()
        runs = [
            RunInfo(
                run_id=job.submission_id,
                state=RunState.from_ray(job.status),
                preset=(job.metadata or {}).get("preset") or None,
                started_at=timestamp(job.start_time),
                ended_at=timestamp(job.end_time),
            )
            for job in jobs
            if (job.metadata or {}).get("service") == SERVICE_TAG and job.submission_id
        ]
        return sorted(runs, key=lambda run: (run.started_at is None, run.started_at or 0, run.run_id))


def _submit_job(api, submission, num_cpus: float | None, num_gpus: float | None) -> str:
    """One job submission of a prepared run (a new run or a resume), on `api`."""
    return api.submit_job(
        entrypoint=submission.entrypoint,
        submission_id=submission.run_id,
        runtime_env=submission.runtime_env,
        metadata=submission.metadata,
        entrypoint_num_cpus=num_cpus,
        entrypoint_num_gpus=num_gpus,
    )
