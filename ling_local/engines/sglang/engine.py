"""SGLangEngine: the daemon's production engine, an SGLang server run as a managed child.

Lifecycle: load the model's tokenizer (prompts are built and counted here, and SGLang gets
``input_ids``), launch the server on 127.0.0.1 with a random key, wait for ``/health``
(asked without the key) while watching the process and showing load progress, check that
the process listening on the port is the child (`listener`), warm up, serve. A crash while
serving ends the requests in flight with an error, marks the engine ``starting`` and
relaunches it with backoff; too many crashes in a row mark it ``failed``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator

import aiohttp

from ling_local import paths
from ling_local.config import Profile
from ling_local.engines.base import (
    Delta,
    EngineHealth,
    EngineState,
    GenerationRequest,
    GenerationStats,
    Priority,
    SamplingParams,
)
from ling_local.engines.sglang.command import (
    HOST,
    build_command,
    local_model_dir,
    model_context_length,
    model_reference,
    reserve_port,
)
from ling_local.engines.sglang.listener import PortTaken, verify_listener
from ling_local.engines.sglang.process import ChildProcess, child_info_file
from ling_local.engines.sglang.progress import LoadProgress, LogFollower, ProgressDisplay
from ling_local.engines.sglang.relay import (
    Flight,
    dumps,
    generate_payload,
    relay_events,
    status_error,
)
from ling_local.engines.sglang.wire import WireError, WirePool, WireResponse
from ling_local.errors import EngineCrashed, EngineError, EngineNotReady
from ling_local.tokenization import TextTokenizer, load_tokenizer

__all__ = ["SGLangEngine", "child_info_file"]

log = logging.getLogger(__name__)

_LOG_TAIL = 15
_HEALTH_TIMEOUT = aiohttp.ClientTimeout(total=2.0)
_ABORT_TIMEOUT = aiohttp.ClientTimeout(total=5.0)
_DRAIN_TIMEOUT_S = 5.0
_PORT_TRIES = 3


class SGLangEngine:
    kind = "sglang"
    supports_preemption = False
    supports_concurrency = True

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.model_name = profile.served_model_name
        self.context_length = profile.model.context_length
        self.state = EngineState.STARTING
        self.detail = "not started"
        self.tokenizer: TextTokenizer | None = None
        self.log_path = paths.log_dir() / f"sglang-{profile.name}.log"
        self._child: ChildProcess | None = None
        self._http: aiohttp.ClientSession | None = None
        self._wire: WirePool | None = None
        """The /generate connections (`wire`: the token path without aiohttp)."""
        self._auth: dict[str, str] = {}
        """The child's key as a header, for aborts: set once the child is verified."""
        self._flights: dict[int, Flight] = {}
        self._crashes: deque[float] = deque()
        self._supervisor: asyncio.Task | None = None
        self._background: set[asyncio.Future] = set()
        self._stopping = False

    # ----------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        try:
            await asyncio.to_thread(self._load_tokenizer, required=False)
            await self._launch()
        except BaseException as err:
            self.state = EngineState.FAILED
            self.detail = err.message if isinstance(err, EngineError) else str(err)
            raise
        self._supervisor = asyncio.create_task(self._supervise())

    def _model_dir(self) -> str:
        m = self.profile.model
        return model_reference(self.profile, m.tokenizer_path or m.path)

    def _load_tokenizer(self, *, required: bool) -> None:
        """The model's own tokenizer. A model given as a Hugging Face id that is not in the
        local cache yet is fetched by SGLang first; its tokenizer is loaded after that."""
        if self.tokenizer is not None:
            return
        ref = self._model_dir()
        local = local_model_dir(ref)
        if not required and local is None:
            log.info("%s is not downloaded yet; SGLang will fetch it", ref)
            return
        self.tokenizer = load_tokenizer(ref, trust_remote_code=self.profile.model.trust_remote_code)
        model_max = model_context_length(local or local_model_dir(ref))
        explicit = "context_length" in self.profile.model.model_fields_set
        if model_max and (not explicit or self.context_length > model_max):
            self.context_length = model_max

    async def _launch(self) -> None:
        for attempt in range(1, _PORT_TRIES + 1):
            try:
                await self._launch_once()
                return
            except PortTaken as err:
                log.error("%s (attempt %d of %d)", err.message, attempt, _PORT_TRIES)
                if attempt == _PORT_TRIES:
                    raise

    async def _launch_once(self) -> None:
        held = reserve_port()  # nobody else binds it plainly, no connection gets it
        port = held.getsockname()[1]
        command = build_command(self.profile, port=port, api_key=_new_api_key())
        child = ChildProcess(command, self.log_path)
        self._child = child
        log.info("launching SGLang: %s", command.redacted())
        # Health checks, aborts and the model's metadata go through aiohttp; /generate, the
        # token path, through `wire` (one write per request, httptools parsing the stream).
        # The session has no key: it goes along only once the listener is known to be ours.
        http = aiohttp.ClientSession(
            base_url=command.url,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=5.0),
            connector=aiohttp.TCPConnector(limit=64),
        )
        child.start()
        try:
            await self._wait_healthy(child, http)
            pid = verify_listener(port, child.pid)
            log.info("127.0.0.1:%d is served by SGLang's process %d", port, pid)
            held.close()
            command.remove_key_file()  # read at start-up; answering /health means it has
            await asyncio.to_thread(self._load_tokenizer, required=True)
            self._http = http
            self._auth = {"Authorization": f"Bearer {command.api_key}"}
            self._wire = WirePool(
                HOST, port, command.api_key, alive=lambda: child.returncode is None
            )
            if self.profile.engine.warmup:
                self.detail = "warming up"
                await self._warmup()
        except BaseException:
            await self._drop_connections()
            await asyncio.shield(child.stop(grace_s=5.0))
            await http.close()
            raise
        finally:
            held.close()
        child.write_info(child_info_file(), self.log_path)
        self.state = EngineState.READY
        self.detail = ""
        log.info(
            "SGLang ready after %.1fs (pid %d)", time.monotonic() - child.started_at, child.pid
        )

    async def _wait_healthy(self, child: ChildProcess, http: aiohttp.ClientSession) -> None:
        timeout = self.profile.sglang.startup_timeout_s
        progress = LoadProgress()
        follower = LogFollower(self.log_path)
        display = ProgressDisplay(f"SGLang {self.model_name}")
        try:
            while True:
                for line in follower.read_lines():
                    progress.feed(line)
                self.detail = progress.describe()
                display.update(progress)
                if (rc := child.returncode) is not None:
                    raise EngineError(self._exit_message(child, rc, "during start-up"))
                if progress.elapsed > timeout:
                    raise EngineError(
                        f"SGLang did not answer /health within {timeout:.0f}s "
                        f"(sglang.startup_timeout_s); last lines of {self.log_path}:\n"
                        + "\n".join(child.tail(_LOG_TAIL))
                    )
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with http.get("/health", timeout=_HEALTH_TIMEOUT) as response:
                        if response.status == 200:
                            return
                await asyncio.sleep(0.25)
        finally:
            display.close()

    def _exit_message(self, child: ChildProcess, rc: int, when: str) -> str:
        how = f"was killed by signal {-rc}" if rc < 0 else f"exited with code {rc}"
        return f"SGLang {how} {when}; last lines of {self.log_path}:\n" + "\n".join(
            child.tail(_LOG_TAIL)
        )

    async def _warmup(self) -> None:
        assert self.tokenizer is not None
        ids = self.tokenizer.encode("def main():\n") or [0]
        request = GenerationRequest(
            prompt="",
            prompt_ids=ids,
            priority=Priority.AGENT,
            sampling=SamplingParams(max_tokens=4),
            request_id="warmup",
        )
        async for delta in self._generate(request):
            if delta.finish_reason == "error":
                raise EngineError(f"SGLang failed its warm-up request: {delta.error}")

    async def _supervise(self) -> None:
        """Relaunch the server when it dies while serving (with backoff)."""
        s = self.profile.sglang
        while not self._stopping and self._child is not None:
            child = self._child
            rc = await child.wait_exit()
            if self._stopping:
                return
            message = self._exit_message(child, rc, "while serving")
            log.error("%s", message)
            child.kill_remnants()
            self.state = EngineState.STARTING
            await self._drop_connections()  # ends the streams in flight (they report it)
            now = time.monotonic()
            self._crashes.append(now)
            while self._crashes and now - self._crashes[0] > s.restart_window_s:
                self._crashes.popleft()
            if len(self._crashes) > s.max_restarts:
                self.state = EngineState.FAILED
                self.detail = (
                    f"SGLang crashed {len(self._crashes)} times in {s.restart_window_s:.0f}s; "
                    f"giving up. {message}"
                )
                return
            delay = min(60.0, s.restart_backoff_s * 2 ** (len(self._crashes) - 1))
            self.detail = (
                f"SGLang {'exited' if rc >= 0 else 'was killed'} ({rc}); restarting in {delay:.0f}s"
            )
            await asyncio.sleep(delay)
            try:
                await self._launch()
            except Exception as err:  # counted as one more crash by the next turn
                log.error("relaunch failed: %s", getattr(err, "message", err))
                self.state = EngineState.STARTING

    async def stop(self) -> None:
        self._stopping = True
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
        self.state = EngineState.STOPPED
        for flight in list(self._flights.values()):
            flight.request.cancel()
        if self._background:  # aborts on their way to SGLang
            await asyncio.wait(list(self._background), timeout=2.0)
        if self._child is not None:
            await self._child.stop()
        await self._drop_connections()
        with contextlib.suppress(OSError):
            child_info_file().unlink()

    async def _drop_connections(self) -> None:
        """Close both ways to the child (no more requests go to it)."""
        wire, http, self._wire, self._http = self._wire, self._http, None, None
        if wire is not None:
            await wire.close()
        if http is not None:
            await http.close()

    def health(self) -> EngineHealth:
        return EngineHealth(
            self.state, self.kind, self.model_name, self.detail, running=len(self._flights)
        )

    # ----------------------------------------------------------------- tokenizer
    def tokenize(self, text: str) -> list[int] | None:
        return None if self.tokenizer is None else self.tokenizer.encode(text)

    def detokenize(self, ids: list[int]) -> str | None:
        return None if self.tokenizer is None else self.tokenizer.decode(ids)

    # ----------------------------------------------------------------- streaming
    def stream(self, request: GenerationRequest) -> AsyncIterator[Delta]:
        if self.state is not EngineState.READY or self._wire is None:
            raise EngineNotReady(f"engine is {self.state.value}: {self.detail}".rstrip(": "))
        return self._generate(request)

    async def abort(self, request: GenerationRequest) -> None:
        request.cancel()
        flight = self._flights.get(id(request))
        if flight is not None and not flight.finished:
            await self._send_abort(flight)

    async def _send_abort(self, flight: Flight) -> None:
        flight.abort_sent = True
        http = self._http
        if http is None:
            return
        try:
            async with http.post(
                "/abort_request",
                json={"rid": flight.rid},
                headers=self._auth,
                timeout=_ABORT_TIMEOUT,
            ) as response:
                await response.read()
        except (aiohttp.ClientError, TimeoutError) as err:
            log.debug("abort of %s failed: %s", flight.rid, err)

    def _max_new_tokens(self, request: GenerationRequest) -> int:
        # The daemon checked that a counted prompt fits (server/state.py); here only the
        # room it leaves caps max_tokens.
        n_prompt = len(request.prompt_ids) if request.prompt_ids is not None else 0
        return max(1, min(request.sampling.max_tokens, self.context_length - n_prompt))

    async def _generate(self, request: GenerationRequest) -> AsyncIterator[Delta]:
        wire = self._wire
        assert wire is not None
        # A fresh uuid per request: SGLang aborts by rid *prefix*, so rids must never be
        # reused nor be prefixes of one another (fixed-length hex is neither).
        flight = Flight(request, uuid.uuid4().hex)
        final: GenerationStats | None = None
        response: WireResponse | None = None
        interrupted = False  # a cancelled task: nothing more can be awaited here
        try:
            payload = generate_payload(request, flight.rid, self._max_new_tokens(request))
            self._flights[id(request)] = flight
            response = await wire.post("/generate", dumps(payload))
            if response.status != 200:
                raise status_error(response.status, await response.read())
            async for delta in relay_events(response.iter_any(), flight):
                if delta.finish_reason is None and request.cancelled:
                    # Cancelled without abort() (or its abort raced the start): stop here;
                    # the finally block tells SGLang.
                    final = flight.final_stats("cancelled")
                    yield Delta(delta.text, delta.n_tokens, "cancelled", final)
                    return
                final = delta.stats
                yield delta
            if final is None:
                raise ValueError("the stream ended without a finish reason")
        except (WireError, ValueError) as err:
            final = flight.final_stats("error")
            yield Delta("", 0, "error", final, await self._stream_error(err))
        except GeneratorExit:
            request.cancel()  # nobody reads any more: the work is cancelled
            raise
        except asyncio.CancelledError:
            request.cancel()
            interrupted = True
            raise
        finally:
            self._flights.pop(id(request), None)
            if response is not None:
                # Abort before the connection closes (SGLang itself only aborts a
                # disconnected stream ~2 s later), in a task of its own so that it also
                # happens when this one is being cancelled.
                task = asyncio.ensure_future(self._close(flight, response))
                self._background.add(task)
                task.add_done_callback(self._background.discard)
                if not interrupted and not flight.finished:
                    await task
            if final is None:
                final = flight.final_stats("cancelled" if request.cancelled else "error")
            if request.on_finish is not None:
                try:
                    request.on_finish(final)
                except Exception:
                    log.exception("on_finish callback failed")

    async def _close(self, flight: Flight, response: WireResponse) -> None:
        if flight.finished:
            # The caller had its last delta and went; the body's tail ("data: [DONE]") is
            # read here, off the token path, so the keep-alive connection goes back to the
            # pool (a fresh connection per request cost ~0.3 ms of TTFT).
            await response.drain(_DRAIN_TIMEOUT_S)
        else:
            await self._send_abort(flight)
            response.close()

    async def _stream_error(self, err: Exception) -> str:
        if isinstance(err, ValueError):
            return f"SGLang: {err}"
        child = self._child
        if self.state is EngineState.STOPPED or self._stopping:
            return "the daemon is shutting down"
        for _ in range(20):  # the socket closes a moment before the exit is visible
            if child is None or child.returncode is not None:
                break
            await asyncio.sleep(0.025)
        if child is not None and child.returncode is not None:
            if child is self._child and self.state is EngineState.READY:
                # Seen here before the supervisor's next poll: stop taking requests now.
                self.state = EngineState.STARTING
                self.detail = f"SGLang exited ({child.returncode}); restarting"
            return EngineCrashed(
                f"the SGLang engine crashed (exit code {child.returncode}) while generating; "
                "it is being restarted"
            ).message
        return f"lost the connection to SGLang: {type(err).__name__}: {err}"


def _new_api_key() -> str:
    # Hex, not urlsafe base64: a key starting with "-" would read as a flag to argparse.
    return secrets.token_hex(32)
