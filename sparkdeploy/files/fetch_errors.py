"""
spark-fetch's errors and its exit statuses: a JobError says why the job cannot go on and what
to do; a network failure (TransientError, or what hf, docker or the head say of one) makes
`spark-fetch run` exit TRANSIENT_EXIT, which spark-fetch@.service runs again with back-off;
anything else stays failed for the deploy to report.

May import: the standard library only (shipped to the Spark beside spark-fetch, its
python3). Must not know: any job, the spec, the status file or the deploy; every other
module of spark-fetch imports it, it imports none of them.
"""

from __future__ import annotations

import errno
import http.client
import re
import socket


class JobError(Exception):
    """The job cannot go on; the message says why and what to do."""


class TransientError(JobError):
    """The job cannot go on because the network failed it (a connection dropped mid-file):
    run again after a pause, it may well finish."""


class WaitedOut(JobError):
    """The job waited as long as the deploy allows (fetch_timeout): never run again by
    systemd, whatever the last error it saw."""


# `spark-fetch run`'s exit statuses: spark-fetch@.service runs the job again (with back-off)
# after TRANSIENT_EXIT only; any other failure stays failed for the deploy to report.
PERMANENT_EXIT = 1  # refused, not found, unauthorised, disk full, a digest mismatch, a bug
TRANSIENT_EXIT = 75  # EX_TEMPFAIL (sysexits.h): a network error; try again later
# What hf, docker and the head say of an error that a later try may not meet again, and of
# one it will meet again: the permanent words win when both appear, and an error neither
# names is permanent (a job never loops on what it does not understand).
TRANSIENT_WORDS = re.compile(
    r"connection (?:reset|refused|aborted|closed|broken)|timed out|timeout|"
    r"temporary failure in name resolution|network is unreachable|no route to host|"
    r"remote ?disconnected|incomplete ?read|unexpected eof|broken pipe|"
    r"too ?many ?requests|\b(?:429|500|502|503|504)\b|bad gateway|service unavailable|"
    r"internal server error|gateway time-?out",
    re.IGNORECASE,
)
PERMANENT_WORDS = re.compile(
    r"\b(?:400|401|403|404|410)\b|unauthori[sz]ed|forbidden|not ?found|manifest unknown|"
    r"access (?:is )?denied|gated|no space left|mismatch|whose sha256|verification failed",
    re.IGNORECASE,
)
NETWORK_ERRORS = (ConnectionError, TimeoutError, http.client.HTTPException)


def is_transient(error: BaseException) -> bool:
    """Whether ``error`` is a network failure a later try may not meet: a dropped, refused
    or silent connection, a Hub, registry or head answering 5xx or 429, as the exception's
    type or its message says; never a full disk or a refusal (401, 403, 404, a digest)."""
    text = str(error)
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return False
    if isinstance(error, WaitedOut) or PERMANENT_WORDS.search(text):
        return False
    if isinstance(error, (TransientError, *NETWORK_ERRORS)):
        return True
    if isinstance(error, socket.gaierror):  # a name that may resolve later, or never
        return error.errno == socket.EAI_AGAIN
    return bool(TRANSIENT_WORDS.search(text))


def exit_status(error: BaseException) -> int:
    """`spark-fetch run`'s exit status for a job that raised ``error``."""
    return TRANSIENT_EXIT if is_transient(error) else PERMANENT_EXIT
