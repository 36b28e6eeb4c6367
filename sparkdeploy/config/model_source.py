"""
The model's class for the GB10 rules, read on the laptop before any Spark is contacted: the
``config.json`` of ``model_repo`` at ``model_revision`` (else of ``model_base_repo``, for
releases that omit it), from the local Hugging Face cache, else from the Hub at
``hf_endpoint`` with a short timeout. ``HF_HUB_OFFLINE`` keeps it to the cache. The HF token
(the variable ``hf_token_env`` names) is passed to the Hub client only, and only where
``config/trust.hf_token`` says it may go (the Hugging Face Hub, or the endpoint the operator
confirmed on this laptop); no message shows it. A malformed config.json is an unknown class.

Whatever fails becomes ``UnknownModel(why)``: the rules scoped to a model class then warn
instead of refusing, and say why the class is unknown.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from sparkdeploy import __version__
from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.config.trust import hf_token
from sparkdeploy.config.values import redact
from sparkdeploy.knowledge.model_class import ModelClass, UnknownModel

TIMEOUT = 8.0  # seconds per Hub request
# (repo, revision, endpoint, token, offline, timeout) -> the parsed config.json
Fetch = Callable[[str, str, str | None, str | None, bool, float], Mapping[str, Any]]
ModelRead = ModelClass | UnknownModel  # the class, or why it is unknown
ModelReader = Callable[[SparkSettings], ModelRead]


def hub_config(
    repo: str,
    revision: str,
    endpoint: str | None,
    token: str | None,
    offline: bool,
    timeout: float,
) -> Mapping[str, Any]:
    """
    ``config.json`` of ``repo`` at ``revision``: from the local Hugging Face cache when it
    has one (no request at all), else one bounded request to the Hub. Not hf_hub_download:
    its retries with back-off (five, about 23 s in all) would hold up every run when the Hub
    cannot be reached, and the class is worth a warning, not a wait. Not even with
    local_files_only for the cache: it builds the client's headers, whose agent detection
    fetches a registry from huggingface.co unless the process's own HF_HUB_OFFLINE is set,
    so `spark-deploy check` (offline) made a request (tests/scenarios/test_cli.py).
    """
    from huggingface_hub import hf_hub_url, try_to_load_from_cache  # only when a model is read
    from huggingface_hub.utils import get_session

    path = try_to_load_from_cache(repo, "config.json", revision=revision)  # files only
    if isinstance(path, str):
        with open(path, encoding="utf-8") as handle:
            return _object(json.load(handle))
    if offline:
        raise FileNotFoundError("config.json is not in the local Hugging Face cache")
    response = get_session().get(
        hf_hub_url(repo, "config.json", revision=revision, endpoint=endpoint),
        headers=_headers(token),
        timeout=timeout,
        follow_redirects=True,
    )
    response.raise_for_status()
    return _object(response.json())


def _headers(token: str | None) -> dict[str, str]:
    """The request's headers, made here: the client's build_hf_headers asks huggingface.co
    for its agent registry first, whatever ``hf_endpoint`` the operator chose (a mirror)."""
    headers = {"user-agent": f"spark-deploy/{__version__}"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    return headers


def _object(data: Any) -> Mapping[str, Any]:
    if not isinstance(data, dict):
        raise ValueError("config.json is not a JSON object")
    return data


def read_model_class(
    spark: SparkSettings,
    fetch: Fetch = hub_config,
    environ: Mapping[str, str] | None = None,
    timeout: float = TIMEOUT,
) -> ModelClass | UnknownModel:
    """The class of the Spark's model, or why it could not be read."""
    if not spark.model_repo:
        return UnknownModel("no model_repo is set")
    environ = os.environ if environ is None else environ
    offline = environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    token = hf_token(spark.hf_token_env, spark.hf_endpoint, environ) or None
    tries = [(spark.model_repo, spark.model_revision)]
    if spark.model_base_repo:
        tries.append((spark.model_base_repo, "main"))
    failures = []
    for repo, revision in tries:
        try:
            config = fetch(repo, revision, spark.hf_endpoint, token, offline, timeout)
        except Exception as error:  # any failure: the class stays unknown, with the reason
            failures.append(f"{repo}@{revision}: {_why(error, token)}")
            continue
        try:
            return ModelClass.from_config(config, source=f"{repo}@{revision} config.json")
        except (TypeError, ValueError, AttributeError, KeyError) as error:
            failures.append(f"{repo}@{revision}: config.json is malformed ({_why(error, token)})")
    where = " (HF_HUB_OFFLINE: local cache only)" if offline else ""
    return UnknownModel(f"its config.json could not be read{where}: " + "; ".join(failures))


def _why(error: Exception, token: str | None) -> str:
    """One line about a failed read, without the token or anything shaped like one."""
    text = f"{type(error).__name__}: {error}".splitlines()[0][:200]
    if token:
        text = text.replace(token, "<token>")
    return redact(text)
