"""Every test process keeps measured machine ceilings in its own temporary cache folder, so
tests neither read nor write the user's cache, and subprocesses they start share it."""

import os
import shutil
import tempfile

import pytest

from attnbench.measure.ceilings import CACHE_ENV

pytest.register_assert_rewrite("helpers")  # its asserts explain their failures too


@pytest.fixture(scope="session", autouse=True)
def ceilings_cache():
    folder = tempfile.mkdtemp(prefix="attnbench-test-cache-")
    saved = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = folder
    yield folder
    if saved is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = saved
    shutil.rmtree(folder, ignore_errors=True)
