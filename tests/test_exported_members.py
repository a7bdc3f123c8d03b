"""One small public surface, checked (as httpx does)."""

import ling_local


def test_public_names_resolve() -> None:
    for name in ling_local.__all__:
        assert getattr(ling_local, name) is not None, name


def test_exceptions_form_one_tree() -> None:
    for name in ling_local.__all__:
        obj = getattr(ling_local, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, ling_local.LingLocalError), name


def test_importing_the_package_stays_light() -> None:
    import subprocess
    import sys

    code = "import ling_local, sys; print('torch' in sys.modules, 'fastapi' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.split() == ["False", "False"]
