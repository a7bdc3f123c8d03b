"""Profiles: TOML files in configs/ (or the user's config dir), validated when loaded.

A profile says which engine serves which model and how. Any field can be overridden from
the environment with ``LING_LOCAL_<SECTION>__<FIELD>``, e.g. ``LING_LOCAL_MODEL__DEVICE=cuda``.
A bad value fails at load time with the field's dotted name in the message.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from ling_local import paths
from ling_local.errors import ConfigError

__all__ = [
    "MANAGED_SGLANG_FLAGS",
    "SAFE_GPU_ENV",
    "EngineSettings",
    "LimitSettings",
    "ModelSettings",
    "Profile",
    "PromptSettings",
    "RemoteSettings",
    "SGLangSettings",
    "SamplingDefaults",
    "SchedulerSettings",
    "builtin_model_dir",
    "list_profiles",
    "load_profile",
]

_PACKAGE_DIR = Path(__file__).resolve().parent


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class EngineSettings(_Section):
    kind: Literal["torch", "sglang", "remote"] = "torch"
    """Which engine serves the model: the embedded PyTorch engine, a managed SGLang child,
    or an OpenAI-compatible server the user already runs."""
    threads: int | None = Field(default=None, ge=1)
    """CPU threads while decoding (default: all cores). One token per step is memory-bound,
    and idle OpenMP threads spin on the core the daemon's event loop needs: 1 is often best."""
    prefill_threads: int | None = Field(default=None, ge=1)
    """CPU threads while processing a prompt, which is compute-bound (default: all cores)."""
    cache_slots: int = Field(default=3, ge=1, le=64)
    """Prefix-cache slots of the embedded engine: completion and chat keep their own KV."""
    speculative: Literal["none", "draft", "prompt_lookup", "auto"] = "none"
    """Speculative decoding in the embedded engine (greedy output is unchanged)."""
    num_speculative_tokens: int = Field(default=4, ge=1, le=16)
    """How many tokens a draft (or prompt lookup) proposes per verify step."""
    cuda_graphs: bool = True
    """Capture the decode step in a CUDA graph when running on a GPU."""
    compile: bool = False
    """torch.compile the graph-captured step (fuses small ops; costs start-up time)."""
    kernels: Literal["auto", "torch", "triton"] = "auto"
    """The GPU decode step's kernels. ``auto``: the hand-written Triton step
    (`engines/embedded/triton/`) on a CUDA GPU for a Llama/Mistral/Qwen2-style model in
    bfloat16 with CUDA graphs on and triton installed, the PyTorch step otherwise
    (`ling-local doctor` and ``GET /health`` say which runs and why). ``triton``: that step
    or a failure at load, with the reason. ``torch``: PyTorch ops, compiled if ``compile``.
    The Triton step is five launches a layer with programmatic dependent launch, RoPE and
    the KV write in the QKV epilogue, SiLU*up in the gate/up epilogue, flash-decoding
    attention on the tensor cores, and for greedy decoding an output head that finds the
    argmax from an int8 copy of the head (recomputing exactly the rows that can win) and
    writes each token straight into pinned host memory; it measured 0.798–0.799 ms/token
    for Llama-3.2-1B on an H200, against 1.08 for a compiled gpt-fast-style loop. It folds
    the RMSNorm weights into the matrices and keeps the int8 copy of the head in GPU
    memory (half the head's bytes)."""
    quantize: Literal["none", "int8"] = "none"
    """Weight-only int8 matmuls on the CPU (4x fewer bytes per token; slightly less exact)."""
    warmup: bool = True
    """Run one short generation at start so the first user request is not the slow one."""

    @model_validator(mode="after")
    def _kernels(self) -> EngineSettings:
        if self.kernels == "triton" and not self.cuda_graphs:
            raise ValueError("kernels = 'triton' runs inside the CUDA-graph step: set cuda_graphs")
        if self.kernels == "triton" and self.compile:
            raise ValueError("kernels = 'triton' replaces the compiled step: unset compile")
        return self


class ModelSettings(_Section):
    path: str
    """Hugging Face-format model directory; ``builtin:NAME`` is a model shipped in the package."""
    name: str | None = None
    """Model id served on /v1/models (default: the profile's name)."""
    draft_path: str | None = None
    """Draft model directory for speculative decoding (same tokenizer)."""
    tokenizer_path: str | None = None
    """Tokenizer directory when it is not the model directory."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Weights dtype; ``auto`` is float32 on CPU and bfloat16 on a GPU."""
    device: str = "cpu"
    """``cpu``, ``cuda``, ``cuda:N`` or ``auto``."""
    context_length: int = Field(default=2048, ge=16)
    """Longest prompt + completion the daemon accepts."""
    trust_remote_code: bool = False
    """Allow model code from the model directory (needed by some architectures)."""

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        if value in ("cpu", "cuda", "auto") or (value.startswith("cuda:") and value[5:].isdigit()):
            return value
        raise ValueError("must be 'cpu', 'cuda', 'cuda:N' or 'auto'")


class SamplingDefaults(_Section):
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    """Default temperature for completions (0 = greedy)."""
    chat_temperature: float = Field(default=0.7, ge=0.0, le=2.0)
    """Default temperature for chat."""
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    completion_max_tokens: int = Field(default=64, ge=1)
    """Default max_tokens of /v1/completions."""
    chat_max_tokens: int = Field(default=512, ge=1)
    """Default max_tokens of /v1/chat/completions."""


class PromptSettings(_Section):
    fim_format: Literal["psm", "spm"] = "psm"
    """Order of a fill-in-the-middle prompt: prefix-suffix-middle or suffix-prefix-middle."""
    fim_prefix: str = "<|fim_prefix|>"
    fim_suffix: str = "<|fim_suffix|>"
    fim_middle: str = "<|fim_middle|>"
    stop: list[str] = Field(default_factory=lambda: ["<|endoftext|>"])
    """Text that ends a generation besides the tokenizer's EOS token."""
    chat_template: Literal["model", "chatml", "plain"] = "model"
    """``model`` uses the tokenizer's own chat template, falling back to ``plain``."""
    token_healing: bool = False
    """Completions (plain and fill-in-the-middle): drop the prompt's last token and let the
    model re-create it (a cursor rarely falls on a token boundary: after a space, inside a
    word); embedded engine only."""
    ban_fim_tokens: bool = True
    """Never generate the FIM control tokens (a small model sometimes emits them)."""
    prefix_tokens: int = Field(default=1024, ge=16)
    """Editor completion: budget for text before the cursor (incl. context snippets)."""
    suffix_tokens: int = Field(default=256, ge=0)
    """Editor completion: budget for text after the cursor."""


class SchedulerSettings(_Section):
    max_running: int = Field(default=1, ge=1, le=64)
    """Generations the engine runs at once (1 = the product's shape)."""
    preempt: bool = True
    """A higher-priority request pauses a running lower-priority one between tokens
    (or runs beside it on engines that batch) instead of waiting for it."""
    max_queue: int = Field(default=64, ge=1)
    """Waiting requests beyond this are refused with 429."""
    queue_timeout_s: float = Field(default=120.0, gt=0)
    """A request that waited this long is refused with 503."""


class LimitSettings(_Section):
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    """Largest request body accepted (413 above)."""
    max_tokens: int = Field(default=4096, ge=1)
    """Largest max_tokens a request may ask for."""
    max_stop: int = Field(default=8, ge=0)
    """Most stop strings a request may give."""
    request_read_timeout_s: float = Field(default=10.0, gt=0)
    """A client must send its whole request (headers and body) within this many seconds
    of connecting, or of the request's first byte; slower ones are disconnected."""


#: Environment the lent multi-GPU machines (and any shared GPU host) need: NVLink multicast
#: can take a host's GPUs out of service, so it stays off unless a profile says otherwise.
SAFE_GPU_ENV: dict[str, str] = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}

#: launch_server flags the daemon owns: it picks the address, the key and the model itself.
MANAGED_SGLANG_FLAGS = frozenset(
    {"--host", "--port", "--api-key", "--config", "--model-path", "--model", "--tokenizer-path"}
)

#: Flags that have their own field, so they cannot also appear in ``sglang.args``.
_FIELD_FLAGS = {
    "--tp-size": "tp_size",
    "--tensor-parallel-size": "tp_size",
    "--tp": "tp_size",
    "--ep-size": "ep_size",
    "--expert-parallel-size": "ep_size",
    "--ep": "ep_size",
    "--mem-fraction-static": "mem_fraction_static",
    "--speculative-algorithm": "speculative_algorithm",
    "--speculative-draft-model-path": "model.draft_path",
    "--speculative-draft-model": "model.draft_path",
    "--trust-remote-code": "model.trust_remote_code",
}

_FORBIDDEN_FLAGS = {
    "--enable-custom-logit-processor": "it lets any request run code in the server",
}


class SGLangSettings(_Section):
    python: str | None = None
    """Interpreter that runs ``-m sglang.launch_server`` (default: the daemon's own)."""
    tp_size: int = Field(default=1, ge=1, le=64)
    """Tensor-parallel GPUs (``--tp-size``); the doctor checks that many GPUs are present."""
    ep_size: int | None = Field(default=None, ge=1, le=64)
    """Expert-parallel size (``--ep-size``); the FP8 Ling checkpoint needs it equal to tp."""
    mem_fraction_static: float | None = Field(default=None, gt=0.0, lt=1.0)
    """Share of GPU memory SGLang takes for weights + KV cache (``--mem-fraction-static``)."""
    speculative_algorithm: str | None = None
    """``DSPARK``, ``NEXTN``, ``EAGLE`` ... (``--speculative-algorithm``); the draft is
    ``model.draft_path``."""
    args: list[str] = Field(default_factory=list)
    """Further launch_server flags, verbatim (checked against SGLang's own parser by the
    flag-check test)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment for the child process (e.g. ``SGLANG_RAGGED_VERIFY_MODE``)."""
    allow_nvlink_multicast: bool = False
    """Leave NVLink multicast to NCCL/PyTorch/NVSHMEM defaults. Off by default: the child
    always gets ``NCCL_NVLS_ENABLE=0``, ``TORCH_SYMM_MEM_DISABLE_MULTICAST=1`` and
    ``NVSHMEM_DISABLE_NVLS=1``, and ``env`` may not change them unless this is true."""
    startup_timeout_s: float = Field(default=900.0, gt=0)
    """Longest wait for the server to answer /health (weights load + CUDA graph capture)."""
    max_restarts: int = Field(default=5, ge=0)
    """Crashes tolerated within ``restart_window_s`` before the engine is marked failed."""
    restart_window_s: float = Field(default=600.0, gt=0)
    restart_backoff_s: float = Field(default=2.0, ge=0)
    """First wait before a restart; doubles with each crash in the window (capped at 60 s)."""

    @field_validator("args")
    @classmethod
    def _args(cls, value: list[str]) -> list[str]:
        for arg in value:
            flag = arg.split("=", 1)[0]
            if flag in MANAGED_SGLANG_FLAGS:
                raise ValueError(f"{flag} is set by the daemon (it owns the address, key, model)")
            if flag in _FIELD_FLAGS:
                raise ValueError(f"{flag} has its own setting: use {_FIELD_FLAGS[flag]} instead")
            if flag in _FORBIDDEN_FLAGS:
                raise ValueError(f"{flag} is refused: {_FORBIDDEN_FLAGS[flag]}")
        return value

    @model_validator(mode="after")
    def _safe_env(self) -> SGLangSettings:
        if not self.allow_nvlink_multicast:
            for name, safe in SAFE_GPU_ENV.items():
                if name in self.env and self.env[name] != safe:
                    raise ValueError(
                        f"env.{name}={self.env[name]} turns NVLink multicast on; "
                        "set allow_nvlink_multicast = true if you really mean it"
                    )
        return self


class RemoteSettings(_Section):
    base_url: str = "http://127.0.0.1:11434/v1"
    """OpenAI-compatible base URL of a server the user already runs (ending in ``/v1``)."""
    api_key_env: str | None = None
    """Environment variable holding that server's API key (never the key itself)."""
    model: str | None = None
    """Model id to ask the remote server for (default: its first model). The daemon sends
    it text (prompts, or chat messages for the server's own template) and lets it count."""
    fim: Literal["auto", "tokens", "suffix"] = "auto"
    """Fill-in-the-middle: ``tokens`` sends one prompt built with the profile's FIM tokens,
    ``suffix`` passes OpenAI's ``suffix`` field on; ``auto`` uses tokens when the profile's
    prompt section names them explicitly."""
    timeout_s: float = Field(default=600.0, gt=0)
    """Longest a single remote request may take."""
    connect_timeout_s: float = Field(default=5.0, gt=0)
    health_interval_s: float = Field(default=10.0, gt=0)
    """How often ``/v1/models`` is polled to tell whether the server is up."""


class Profile(BaseSettings):
    """One way of serving a model. Loaded from TOML; env vars override single fields."""

    model_config = SettingsConfigDict(
        env_prefix="LING_LOCAL_", env_nested_delimiter="__", extra="forbid"
    )

    name: str
    description: str = ""
    source: str | None = None
    """Where the profile was loaded from (filled in by load_profile)."""
    engine: EngineSettings = Field(default_factory=EngineSettings)
    model: ModelSettings
    sampling: SamplingDefaults = Field(default_factory=SamplingDefaults)
    prompt: PromptSettings = Field(default_factory=PromptSettings)
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    sglang: SGLangSettings = Field(default_factory=SGLangSettings)
    remote: RemoteSettings = Field(default_factory=RemoteSettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The environment wins over the TOML file, so a user can flip one field.
        return (env_settings, init_settings)

    @model_validator(mode="after")
    def _fill_defaults(self) -> Profile:
        if self.model.name is None:
            self.model.name = self.name
        for field in ("completion_max_tokens", "chat_max_tokens"):
            if getattr(self.sampling, field) > self.limits.max_tokens:
                raise ValueError(
                    f"sampling.{field} is above limits.max_tokens ({self.limits.max_tokens})"
                )
        return self

    @property
    def served_model_name(self) -> str:
        return self.model.name or self.name

    def resolve_path(self, value: str | None) -> Path | None:
        """Resolve a model/tokenizer path: ``builtin:NAME``, ``~``, or relative to the TOML."""
        if value is None:
            return None
        if value.startswith("builtin:"):
            return builtin_model_dir(value.removeprefix("builtin:"))
        path = Path(value).expanduser()
        if not path.is_absolute() and self.source:
            path = Path(self.source).parent / path
        return path


def builtin_model_dir(name: str) -> Path:
    """Directory of a model shipped inside the package (``ling_local/models/NAME``)."""
    return _PACKAGE_DIR / "models" / name


def _builtin_profile_dirs() -> list[Path]:
    dirs = [_PACKAGE_DIR / "_configs", _PACKAGE_DIR.parent / "configs"]
    return [d for d in dirs if d.is_dir()]


def _profile_dirs() -> list[Path]:
    # User profiles shadow the shipped ones of the same name.
    return [paths.config_dir() / "profiles", *_builtin_profile_dirs()]


def list_profiles() -> dict[str, Path]:
    """Every profile name that ``--profile NAME`` accepts, with the file it comes from."""
    found: dict[str, Path] = {}
    for directory in _profile_dirs():
        if directory.is_dir():
            for file in sorted(directory.glob("*.toml")):
                found.setdefault(file.stem, file)
    return found


def _format_validation_error(err: ValidationError) -> str:
    parts = []
    for item in err.errors():
        loc = ".".join(str(p) for p in item["loc"]) or "(profile)"
        parts.append(f"{loc}: {item['msg']}")
    return "; ".join(parts)


def profile_from_dict(data: dict[str, Any], *, source: str | None = None) -> Profile:
    """Validate a profile given as a dict (what a TOML file holds)."""
    label = source or data.get("name", "<profile>")
    try:
        return Profile(**{**data, "source": source})
    except ValidationError as err:
        raise ConfigError(f"invalid profile {label}: {_format_validation_error(err)}") from None
    except TypeError as err:  # e.g. a section given as a plain value
        raise ConfigError(f"invalid profile {label}: {err}") from None


def load_profile(name_or_path: str | Path = "tiny") -> Profile:
    """Load a profile by name (user dir first, then shipped) or by path to a TOML file."""
    text = str(name_or_path)
    candidate = Path(text).expanduser()
    if text.endswith(".toml") or candidate.is_file() or "/" in text:
        if not candidate.is_file():
            raise ConfigError(f"profile file not found: {candidate}")
        file = candidate.resolve()
    else:
        known = list_profiles()
        if text not in known:
            names = ", ".join(sorted(known)) or "none"
            raise ConfigError(f"unknown profile {text!r}; known profiles: {names}")
        file = known[text]
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise ConfigError(f"cannot read profile {file}: {err}") from None
    data.setdefault("name", file.stem)
    return profile_from_dict(data, source=str(file))
