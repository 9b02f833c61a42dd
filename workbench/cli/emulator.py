"""`workbench emulator`: the loopback provider emulator (every dialect on one port).

See :mod:`workbench.emulator` for the endpoints, the fault model and the admin API.
"""

from __future__ import annotations

from pathlib import Path

import typer

from workbench.cli.common import HOST, emit_json, err_console
from workbench.wording import plural


def register(app: typer.Typer) -> None:
    @app.command("emulator")
    def emulator(
        port: int = typer.Option(8787, "--port", help="Port to listen on (0 picks a free one)."),
        host: str = HOST,
        latency_ms: float = typer.Option(
            0.0, "--latency-ms", help="Added latency: fixed, or the median when --latency-p95-ms is given."
        ),
        latency_p95_ms: float | None = typer.Option(
            None, "--latency-p95-ms", help="p95 latency: makes the latency lognormal."
        ),
        latency_profile: str | None = typer.Option(
            None,
            "--latency-profile",
            help="'published': Cloudflare's per-model median/p95 (clef 209.3/238.6 ms, clef-flash 38.8/122.4 ms).",
        ),
        fault_429: float = typer.Option(0.0, "--fault-429", help="Fraction answered 429 / 3040 (capacity)."),
        fault_quota: float = typer.Option(0.0, "--fault-quota", help="Fraction answered 429 / 4006 (quota)."),
        fault_500: float = typer.Option(0.0, "--fault-500", help="Fraction answered 500."),
        fault_529: float = typer.Option(0.0, "--fault-529", help="Fraction answered 529 / 5012."),
        fault_timeout: float = typer.Option(
            0.0, "--fault-timeout", help="Fraction that hang for --timeout-sleep-s seconds."
        ),
        timeout_sleep_s: float = typer.Option(30.0, "--timeout-sleep-s", help="How long a 'timeout' hangs."),
        fault_reset: float = typer.Option(0.0, "--fault-reset", help="Fraction whose connection is reset."),
        fault_malformed: float = typer.Option(
            0.0, "--fault-malformed", help="Fraction answered 200 with truncated JSON."
        ),
        fault_refusal: float = typer.Option(
            0.0, "--fault-refusal", help="OpenAI dialect: fraction of questions refused."
        ),
        truncate_state_tokens: int | None = typer.Option(
            None,
            "--truncate-state-tokens",
            help="Silently read only the first N state tokens (hosted Clef until 2026-10-04: 2048).",
        ),
        position_bias: float = typer.Option(
            0.0,
            "--position-bias",
            help="Boost the first listed option of every choice question: p -> (1-b)·p + b·first (0 = off).",
        ),
        require_token: str | None = typer.Option(
            None,
            "--require-token",
            envvar="WORKBENCH_EMULATOR_TOKEN",
            help="Require 'Authorization: Bearer TOKEN' (401 otherwise).",
        ),
        answerer: str = typer.Option(
            "lexical",
            "--answerer",
            help="'lexical' (cheap, deterministic) or a local provider spec such as local:minilm-zeroshot.",
        ),
        max_body_bytes: int = typer.Option(524_288, "--max-body-bytes", help="Bodies above get 413 / 5021."),
        seed: int = typer.Option(0, "--seed", help="Seed of the fault and latency draws."),
        tls_cert: Path | None = typer.Option(
            None, "--tls-cert", help="Serve HTTPS with this PEM certificate chain (clients must trust its CA)."
        ),
        tls_key: Path | None = typer.Option(
            None, "--tls-key", help="PEM private key of --tls-cert (omit when the key is in the certificate file)."
        ),
        json_out: bool = typer.Option(
            False, "--json", help="Print the listening address as one JSON document on stdout once ready."
        ),
    ) -> None:
        """Serve Cloudflare Workers AI, System One, OpenAI Decisions and Vercel dialects on loopback."""
        import asyncio
        import ssl

        from workbench.emulator import EmulatorServer, FaultConfig, answerer_from_spec
        from workbench.errors import WorkbenchError

        try:
            faults = FaultConfig(
                latency_ms=latency_ms,
                latency_p95_ms=latency_p95_ms,
                latency_profile=latency_profile,
                rate_limit=fault_429,
                quota=fault_quota,
                server_error=fault_500,
                overloaded=fault_529,
                timeout=fault_timeout,
                reset=fault_reset,
                malformed=fault_malformed,
                refusal=fault_refusal,
                truncate_state_tokens=truncate_state_tokens,
                position_bias=position_bias,
                timeout_sleep_s=timeout_sleep_s,
                seed=seed,
            ).validate()
        except ValueError as exc:
            raise WorkbenchError(
                f"emulator: {exc}",
                hint="fault fractions are in [0, 1] and add up to <= 1; --position-bias is in [0, 1)",
            ) from None
        if host not in ("127.0.0.1", "localhost", "::1"):
            err_console.print(
                f"[yellow]warning:[/] binding to {host}: the emulator is meant for loopback", soft_wrap=True
            )
        if tls_key is not None and tls_cert is None:
            raise WorkbenchError("emulator: --tls-key was given without --tls-cert", hint="pass both, or neither")
        try:
            server = EmulatorServer(
                host,
                port,
                answerer=answerer_from_spec(answerer),
                faults=faults,
                require_token=require_token,
                max_body_bytes=max_body_bytes,
                ssl_certfile=tls_cert,
                ssl_keyfile=tls_key,
            )
        except (OSError, ssl.SSLError) as exc:
            raise WorkbenchError(
                f"emulator: cannot load the TLS certificate {tls_cert}"
                + (f" with the key {tls_key}" if tls_key is not None else "")
                + f": {exc}",
                hint="--tls-cert takes a PEM certificate chain and --tls-key its PEM private key",
            ) from None

        async def _main() -> None:
            try:
                await server.start()
            except OSError as exc:
                raise WorkbenchError(
                    f"emulator: cannot listen on {host}:{port}: {exc.strerror}",
                    hint="pick another --port (0 = any free port)",
                ) from None
            info = {
                "base_url": server.base_url,
                "cloudflare_base_url": server.cloudflare_base_url,
                "systemone_url": f"{server.base_url}/v1/systemone",
                "stats_url": f"{server.base_url}/_emulator/stats",
            }
            if json_out:
                emit_json(info)
            err_console.print(
                f"emulator listening on {server.base_url}  "
                f"(CLOUDFLARE_CLEF_BASE_URL={server.cloudflare_base_url}; stats at /_emulator/stats; "
                f"answerer {answerer}; Ctrl-C stops)"
            )
            import signal

            task = asyncio.current_task()
            assert task is not None  # inside asyncio.run
            with __import__("contextlib").suppress(NotImplementedError):  # SIGTERM stops cleanly
                asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
            try:
                await server.serve()
            except asyncio.CancelledError:
                pass

        try:
            asyncio.run(_main())
        except KeyboardInterrupt:
            pass
        err_console.print(f"emulator stopped; {plural(server.stats['total'], 'request')} served")
