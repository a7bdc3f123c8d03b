"""``python -m sglang.launch_server`` for tests: the protocol-level stand-in."""

from tests.sglang_standin import main

if __name__ == "__main__":
    main()
