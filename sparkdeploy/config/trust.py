"""
What a copied inventory may make the laptop do, decided once each: which laptop variables it
may name as the HF token or the API key, where the HF token may be sent, and which paths it
may name for the engine to mount or for the models to go in.

The inventory is untrusted: operators build theirs from recipes strangers publish, and the
laptop running the deploy holds the operator's other credentials (a GitHub token, cloud keys,
the SSH agent). A recipe must not be able to make the deploy read one of them and send it
somewhere (issue 22, "A copied recipe exfiltrates laptop secrets"), nor give the engine's
container a path that holds the Spark's secrets ("Guards that a parent path walks around").

What the operator confirms is confirmed in the laptop's environment, never in the inventory
(a recipe cannot confirm for the operator): ``SPARK_TRUST_HF_ENDPOINT`` names the one Hub
mirror the HF token may go to besides the Hugging Face Hub.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from typing import Annotated

from pydantic import AfterValidator

from sparkdeploy.config.values import absolute_path, env_name, looks_like_secret

# --- laptop variables --------------------------------------------------------------------

# Variables that hold a credential for something other than this deploy (or give access like
# one): a recipe naming one as hf_token_env would have the deploy send it to hf_endpoint (and
# install it on the Spark); as api_key_env, store it on the Spark and in every client's
# requests. Exact names, then prefixes (whole families of a cloud's or tool's variables).
# Sources: the variables each tool documents (GitHub CLI, AWS CLI, gcloud, Azure CLI, OpenAI,
# Anthropic, NGC CLI, Docker, npm, PyPI/twine, Vault, Slack, Cloudflare, Kubernetes, GPG).
FOREIGN_CREDENTIALS = frozenset(
    {
        "GITHUB_TOKEN", "GH_TOKEN", "GH_ENTERPRISE_TOKEN", "GITHUB_ENTERPRISE_TOKEN",
        "GITHUB_PAT", "GITLAB_TOKEN", "GL_TOKEN", "CI_JOB_TOKEN", "BITBUCKET_TOKEN",
        "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "MISTRAL_API_KEY", "GROQ_API_KEY",
        "GEMINI_API_KEY", "COHERE_API_KEY", "TOGETHER_API_KEY", "OPENROUTER_API_KEY",
        "NGC_API_KEY", "NGC_CLI_API_KEY", "NVIDIA_API_KEY", "WANDB_API_KEY",
        "SSH_AUTH_SOCK", "SSH_AGENT_PID", "GPG_AGENT_INFO", "KUBECONFIG",
        "DOCKER_PASSWORD", "DOCKER_AUTH_CONFIG", "REGISTRY_PASSWORD",
        "NPM_TOKEN", "NODE_AUTH_TOKEN", "PYPI_TOKEN", "TWINE_PASSWORD", "TWINE_USERNAME",
        "CARGO_REGISTRY_TOKEN", "VAULT_TOKEN", "CONSUL_HTTP_TOKEN", "NOMAD_TOKEN",
        "SLACK_TOKEN", "SLACK_BOT_TOKEN", "DISCORD_TOKEN", "TELEGRAM_BOT_TOKEN",
        "CLOUDFLARE_API_TOKEN", "CLOUDFLARE_API_KEY", "DIGITALOCEAN_TOKEN",
        "DIGITALOCEAN_ACCESS_TOKEN", "HCLOUD_TOKEN", "LINODE_TOKEN", "VULTR_API_KEY",
        "HEROKU_API_KEY", "NETLIFY_AUTH_TOKEN", "VERCEL_TOKEN", "SENTRY_AUTH_TOKEN",
        "DATABASE_URL", "PGPASSWORD", "MYSQL_PWD", "REDIS_PASSWORD", "SNOWFLAKE_PASSWORD",
        "STRIPE_API_KEY", "STRIPE_SECRET_KEY", "TWILIO_AUTH_TOKEN", "SENDGRID_API_KEY",
        "TF_TOKEN_APP_TERRAFORM_IO", "ARM_CLIENT_SECRET", "OP_SERVICE_ACCOUNT_TOKEN",
        "BW_SESSION", "LASTPASS_PASSWORD", "HOME", "PATH", "USER", "LOGNAME", "SHELL",
    }
)  # fmt: skip
FOREIGN_PREFIXES = (
    "AWS_", "AMAZON_", "GOOGLE_", "GCLOUD_", "GCP_", "CLOUDSDK_", "AZURE_", "ARM_", "OCI_",
    "ALIBABA_CLOUD_", "ALICLOUD_", "IBMCLOUD_", "SSH_", "GPG_", "GNUPG", "KUBE", "DOCKER_",
    "GITHUB_", "GH_", "ACTIONS_", "RUNNER_", "SPARK_TRUST_",
)  # fmt: skip
# The HF token's own variables: never the API key (the key would be the token, sent with
# every client request and stored where the engine reads it).
HF_TOKEN_VARIABLES = frozenset({"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_TOKEN"})
# A pasted token where a variable's name belongs: the shapes SECRET knows, a token prefix at
# the start, or a long run of mixed case and digits no variable is named like.
TOKEN_PREFIX = re.compile(
    r"(hf_|sk-|sk_|gh[pousr]_|github_pat_|glpat-|nvapi-|xox[abprs]-|AKIA|ASIA|AIza|eyJ)",
)
MIXED_RUN = re.compile(r"(?=.*[a-z])(?=.*[A-Z0-9])[A-Za-z0-9]{24,}")
SECRET_ITSELF = (
    "the value looks like a secret itself (it is not shown); put the variable's NAME here, "
    "such as {example}, and export the secret on this laptop under that name"
)


def pasted_secret(value: str) -> bool:
    """Whether a value given where a variable's name belongs looks like the secret."""
    return bool(looks_like_secret(value) or TOKEN_PREFIX.match(value) or MIXED_RUN.search(value))


def foreign_credential(name: str) -> bool:
    """Whether the laptop variable ``name`` holds a credential that is not this deploy's."""
    upper = name.upper()
    return upper in FOREIGN_CREDENTIALS or upper.startswith(FOREIGN_PREFIXES)


def credential_variable(name: str, example: str) -> str:
    """A laptop variable an inventory may name to hold this deploy's HF token or API key:
    a variable name, not a pasted secret, not another tool's credential."""
    if pasted_secret(name):
        raise ValueError(SECRET_ITSELF.format(example=example))
    env_name(name)
    if foreign_credential(name):
        raise ValueError(
            f"{name} is a laptop credential of another tool (sparkdeploy/config/trust.py "
            "FOREIGN_CREDENTIALS); the deploy would send it on. Name a variable of this "
            f"deploy's own, such as {example}"
        )
    return name


def hf_token_variable(name: str) -> str:
    """hf_token_env: a credential variable of this deploy's own."""
    return credential_variable(name, "HF_TOKEN")


def api_key_variable(name: str) -> str:
    """engine.api_key_env: a credential variable that is not the HF token's."""
    credential_variable(name, "SPARK_API_KEY")
    if name.upper() in HF_TOKEN_VARIABLES:
        raise ValueError(
            f"{name} holds the HF token; the API key would be the token, stored on the Spark "
            "and sent by every client. Name a variable of its own, such as SPARK_API_KEY"
        )
    return name


# --- where the HF token goes -------------------------------------------------------------

HF_HUB = "https://huggingface.co"
TRUST_ENDPOINT_ENV = "SPARK_TRUST_HF_ENDPOINT"


def _same_url(a: str, b: str) -> bool:
    return a.strip().rstrip("/") == b.strip().rstrip("/")


def token_endpoint_trusted(endpoint: str | None, environ: Mapping[str, str]) -> bool:
    """Whether the HF token may go to ``endpoint`` (None: the Hugging Face Hub): the Hub
    itself, or the one endpoint the operator named in SPARK_TRUST_HF_ENDPOINT on this
    laptop. The one decision for every place the token goes: the laptop's read of
    config.json and the token installed on the Spark, whose hf command sends it to
    HF_ENDPOINT."""
    if endpoint is None or _same_url(endpoint, HF_HUB):
        return True
    trusted = environ.get(TRUST_ENDPOINT_ENV, "")
    return bool(trusted) and _same_url(trusted, endpoint)


def hf_token(token_env: str, endpoint: str | None, environ: Mapping[str, str]) -> str:
    """The HF token the deploy may use for a Spark ("" when none is set or it may not go to
    the Spark's endpoint)."""
    if not token_endpoint_trusted(endpoint, environ):
        return ""
    return environ.get(token_env, "").strip()


def withheld_token_warning(token_env: str, endpoint: str | None, environ: Mapping[str, str]) -> str:
    """Why the HF token is not used, when it is set and the endpoint is not trusted ("")."""
    if not environ.get(token_env, "").strip() or token_endpoint_trusted(endpoint, environ):
        return ""
    return (
        f"key 'hf_endpoint': {endpoint} is not the Hugging Face Hub ({HF_HUB}), so the HF "
        f"token (${token_env}) is not sent there: not to read config.json, not to the Spark. "
        f"If you trust this mirror with it, export {TRUST_ENDPOINT_ENV}={endpoint} on this "
        "laptop"
    )


# --- paths on the Spark ------------------------------------------------------------------

# Folders a mount may not take, be under or be a parent of: the system's configuration and
# secrets, kernel interfaces, Docker (its socket controls Docker even read-only), temporary
# folders (SSH and GPG agent sockets, other users' files), the deploy's own state (rollback
# copies of root-only files) and venvs. /opt/spark-deploy itself is refused as their parent;
# folders of its own under it are not (recipes mount /opt/spark-deploy/recipes/...).
MOUNT_TREES_REFUSED = (
    "/boot", "/dev", "/etc", "/proc", "/root", "/run", "/sys", "/var/run", "/var/lib/docker",
    "/tmp", "/var/tmp", "/var/lib/spark-deploy", "/opt/spark-deploy/hf-cli",
    "/opt/spark-deploy/mcp", "/snap",
)  # fmt: skip
# Folder names that hold credentials wherever they are (any hidden folder is refused too:
# ~/.cache/huggingface holds the HF token).
SECRET_FOLDERS = (".ssh", ".gnupg", ".docker", ".aws", ".kube", ".config", ".azure")


def overlaps(path: str, tree: str) -> bool:
    """``path`` is ``tree``, under it, or a parent of it (both normalised)."""
    return path == tree or path.startswith(tree + "/") or tree.startswith(path.rstrip("/") + "/")


def holds(path: str, tree: str) -> bool:
    """``path`` is ``tree`` or a parent of it."""
    return path == tree or tree.startswith(path.rstrip("/") + "/")


def _home_or_hidden(parts: list[str]) -> str | None:
    """Why a path (split in parts) is /home, a home, or in a hidden folder, or None."""
    if parts[:1] == ["home"] and len(parts) <= 2:
        return "is /home or a home folder (a home holds ~/.ssh and the HF token)"
    if set(parts) & set(SECRET_FOLDERS) or any(part.startswith(".") for part in parts):
        return (
            "holds credentials, or is in a hidden folder where they live (~/.ssh, ~/.docker, "
            "~/.cache/huggingface with the HF token)"
        )
    return None


def mount_source_problem(path: str) -> str | None:
    """Why the Spark's ``path`` (normalised, absolute) may not be mounted into an engine
    container, or None."""
    if path == "/":
        return "is or holds a system path (/): the whole file system"
    taken = [tree for tree in MOUNT_TREES_REFUSED if overlaps(path, tree)]
    if taken:
        return f"is or holds a system path ({', '.join(taken)})"
    return _home_or_hidden([part for part in path.split("/") if part])


# model_dir: folders the models may not go in, under or above: the system's, the deploy's
# own trees (the hf command's venv, where root runs pip; its state; its scripts), and shared
# temporary folders any local user can plant in. Any bin/sbin folder: a model folder there
# would put the repository's files on someone's PATH.
MODEL_DIR_TREES_REFUSED = (
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/root",
    "/run", "/sbin", "/snap", "/sys", "/usr", "/var", "/tmp", "/opt/spark-deploy",
)  # fmt: skip
PROGRAM_FOLDERS = frozenset({"bin", "sbin"})


def model_dir_problem(path: str) -> str | None:
    """Why ``path`` (normalised, absolute) may not be the folder models go in, or None."""
    taken = [tree for tree in MODEL_DIR_TREES_REFUSED if overlaps(path, tree)]
    if path == "/" or taken:
        return f"is, is under or holds a system or deploy folder ({', '.join(taken) or '/'})"
    parts = [part for part in path.split("/") if part]
    if PROGRAM_FOLDERS & set(parts):
        return "is or is under a bin/sbin folder (programs on someone's PATH)"
    if len(parts) < 2:
        return "is one level deep: a model folder in it would be a top-level folder"
    return _home_or_hidden(parts)


def same_folder_problem(folders: Mapping[str, str]) -> str | None:
    """Two repositories (key -> repo) whose downloads would share one folder, since a
    repository's folder is model_dir/<its name>."""
    seen: dict[str, str] = {}
    for key, repo in folders.items():
        name = posixpath.basename(repo).lower()
        if name in seen:
            return (
                f"{seen[name]} and {key} both download into model_dir/{posixpath.basename(repo)}"
                " (a repository's folder is its name), so one would overwrite the other; use "
                "repositories of different names (a copy of one under another name)"
            )
        seen[name] = key
    return None


def model_dir(value: str) -> str:
    """The folder models go in (normalised): see ``model_dir_problem``."""
    path = absolute_path(value, "/opt/models")
    problem = model_dir_problem(path)
    if problem:
        raise ValueError(
            f"{path} {problem}; give a folder of its own at least two levels deep, such as "
            "/opt/models or /home/nvidia/models"
        )
    return path


HfTokenVariable = Annotated[str, AfterValidator(hf_token_variable)]
ApiKeyVariable = Annotated[str, AfterValidator(api_key_variable)]
ModelDir = Annotated[str, AfterValidator(model_dir)]
