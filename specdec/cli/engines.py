"""`python -m specdec engines build|serve|status`: llama.cpp's server on the embedded pair;
`engines serve vllm`: vLLM's (its environment comes from `make vllm`)."""

from __future__ import annotations

import signal
import sys
import threading

from specdec.engines import choice
from specdec.engines.base import LLAMA_CPP


def add_engines_command(sub) -> None:
    e = sub.add_parser("engines", help="real engines: build llama.cpp's llama-server and serve the embedded pair")
    actions = e.add_subparsers(dest="action", required=True)
    b = actions.add_parser("build", help="build llama-server from source once (cached; about 8 minutes on 2 cores)")
    b.add_argument("--if-possible", action="store_true", help="without cmake or a C++ compiler, say so and exit 0 (make test)")
    b.set_defaults(func=cmd_build)
    s = actions.add_parser("serve", help="serve the embedded pair with llama-server (its GGUF files) or vLLM (its converted folders) until Ctrl-C")
    s.add_argument("engine", nargs="?", choices=choice.REMOTE, default=LLAMA_CPP, help=f"which server (default {LLAMA_CPP})")
    s.add_argument("--lane", choices=("speculative", "plain", "both"), default=None,
                   help="speculative: with the draft model; plain: the target alone; both: one server each "
                        "(default: both for llama.cpp; speculative for vLLM, whose server takes 10 GB or more)")
    s.add_argument("--k", type=int, default=5, help="draft tokens per step of the speculative server (default 5)")
    s.set_defaults(func=cmd_serve)
    actions.add_parser("status", help="whether llama-server is built, where, and for which CPU").set_defaults(func=cmd_status)


def cmd_build(args) -> int:
    from specdec.engines.llamacpp_build import BuildUnavailable, build

    try:
        path = build()
    except BuildUnavailable as err:
        if not args.if_possible:
            raise
        print(f"{err}; the llama.cpp tests will be skipped")
        return 0
    print(f"llama-server: {path}")
    return 0


def cmd_status(args) -> int:
    from specdec.engines.llamacpp_build import SDIST, SDIST_VERSION, build_folder, build_key, is_built, missing_tools

    from specdec.engines.llamacpp_build import OWN_BINARY, own_binary

    if own_binary() is not None:
        print(f"using {own_binary()} (from ${OWN_BINARY}); nothing is built")
        return 0
    folder = build_folder()
    print(f"llama.cpp from the {SDIST} {SDIST_VERSION} sdist, build key {build_key()} (this CPU and the cmake flags)")
    if is_built():
        print(f"built: {folder / 'bin' / 'llama-server'} (licence: {folder / 'LICENSE'})")
    else:
        missing = missing_tools()
        print("not built: `python -m specdec engines build` builds it into " + str(folder)
              + (f" (needs {', '.join(missing)})" if missing else ""))
    return 0


def cmd_serve(args) -> int:
    from specdec.engines.base import EngineError

    engine = choice.server_module(args.engine)
    PLAIN, SPECULATIVE = engine.PLAIN, engine.SPECULATIVE
    # Both lanes where two servers fit beside each other; else the speculative one alone (vLLM's takes 10 GB or more).
    args.lane = args.lane or ("both" if choice.capabilities(args.engine).side_by_side else "speculative")

    if args.k < 1:
        raise ValueError(f"--k must be at least 1, got {args.k}")
    lanes = [SPECULATIVE, PLAIN] if args.lane == "both" else [args.lane]
    servers = []
    try:
        for lane in lanes:
            servers.append(engine.start_server(lane, k=args.k))
            print(f"{servers[-1].name}: {servers[-1].url}  (log {servers[-1].log_path})", flush=True)
        print("serving; Ctrl-C stops", flush=True)
        stopped = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stopped.set())
        while not stopped.wait(1.0):
            for server in servers:
                if not server.running:
                    raise EngineError(f"{server.name} exited; see log {server.log_path}")
    except KeyboardInterrupt:
        pass
    except EngineError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    finally:
        for server in servers:
            server.stop()
    return 0
