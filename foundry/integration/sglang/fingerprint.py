"""What an SGLang archive is for: SGLang's version, the model, and every server setting that can shape the
graphs or the memory layout, with the software versions and GPU every engine's fingerprint holds
(shared/fingerprint.py). Each setting is a field of its own (``args.<name>``), so that LOAD's refusal names
the ones that differ.

Taken in the scheduler process when the model runner sets up torch.distributed, before anything is allocated:
both runs are compared at the same moment of SGLang's start-up (it resolves some settings in place later).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from ..shared.fingerprint import config_digest, software_fields
from ..shared.metadata import Fingerprint

__all__ = ["IGNORED", "describe", "settings"]

# ServerArgs fields that change neither the model's device memory nor its graphs: the network, the HTTP and
# tokenizer front end, logging, metrics and tracing, and the random seed (SGLang draws one per start when none
# is given; it seeds sampling, and dummy weights' values, never where a tensor lies). Everything else is
# compared.
IGNORED = frozenset(
    {
        "host", "port", "nccl_port", "dist_init_addr", "fastapi_root_path", "smg_grpc_mode", "grpc_mode",
        "grpc_port", "sidecar", "sidecar_args", "skip_server_warmup", "warmups", "enable_http2", "ssl_keyfile",
        "ssl_certfile", "ssl_ca_certs", "ssl_keyfile_password", "enable_ssl_refresh", "api_key", "admin_api_key",
        "served_model_name", "weight_version", "chat_template", "hf_chat_template_name", "completion_template",
        "file_storage_path", "enable_cache_report", "reasoning_parser", "default_chat_template_kwargs",
        "strip_thinking_cache", "enable_strict_thinking", "tool_call_parser", "tool_server",
        "tokenizer_worker_num", "detokenizer_worker_num", "log_level", "log_level_http", "log_requests",
        "log_requests_level", "log_requests_format", "log_requests_target", "uvicorn_access_log_exclude_prefixes",
        "crash_dump_folder", "show_time_cost", "enable_metrics", "smg_http_sidecar_port", "enable_mfu_metrics",
        "enable_metrics_for_all_schedulers", "load_snapshot_publish_interval",
        "tokenizer_metrics_custom_labels_header", "tokenizer_metrics_allowed_custom_labels", "extra_metric_labels",
        "bucket_time_to_first_token", "bucket_inter_token_latency", "bucket_e2e_request_latency",
        "prompt_tokens_buckets", "generation_tokens_buckets", "gc_warning_threshold_secs", "decode_log_interval",
        "enable_request_time_stats_logging", "enable_trace", "trace_modules", "otlp_traces_endpoint",
        "export_metrics_to_file", "export_metrics_to_file_dir", "stat_loggers", "watchdog_timeout",
        "soft_watchdog_timeout", "custom_sigquit_handler", "download_dir", "random_seed",
    }
)  # fmt: skip


def _text(value: Any) -> str:
    """A stable text of a setting: JSON where it can be, and never an object's address."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        try:
            value = dataclasses.asdict(value)
        except (TypeError, ValueError, RecursionError):
            value = repr(value)

    def fallback(obj: Any) -> str:
        text = repr(obj)
        return type(obj).__name__ if " at 0x" in text else text

    return json.dumps(value, sort_keys=True, default=fallback)


def settings(server_args: Any) -> dict[str, str]:
    """``args.<name>`` for every ServerArgs field that is compared."""
    if not dataclasses.is_dataclass(server_args):
        return {"args": "?"}
    return {
        f"args.{f.name}": _text(getattr(server_args, f.name, None))
        for f in dataclasses.fields(server_args)
        if f.name not in IGNORED
    }


def describe(model_runner: Any, device_name: str | None = None) -> Fingerprint:
    """The fingerprint of this scheduler's model runner (imports torch and SGLang: call it in the scheduler)."""
    import sglang
    import torch

    if device_name is None:
        device_name = str(torch.cuda.get_device_name(torch.cuda.current_device()))
    model = model_runner.model_config
    hf = getattr(model, "hf_config", None)
    to_dict = getattr(hf, "to_dict", None)
    return Fingerprint.of(
        {
            "sglang": sglang.__version__,
            **software_fields(torch, device_name),
            "hf_config_sha256": config_digest(to_dict()) if callable(to_dict) else "?",
            "dtype": getattr(model, "dtype", "?"),
            "context_len": getattr(model, "context_len", "?"),
            **settings(model_runner.server_args),
        }
    )
