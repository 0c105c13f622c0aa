"""A worker's setup pays the learner's one-time costs, so round 1 costs what a round costs."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROBE = textwrap.dedent("""
    import sys
    from flowerbed.clients import client_app
    from flowerbed.core.scenario import load_scenario

    text = load_scenario("scenarios/quickstart.yaml", ["baselines=[]"]).to_yaml()
    client_app._warm(text, 0)
    before = set(sys.modules)
    learner, data = client_app._learner(text), client_app._data(text).client(0)
    learner.fit(learner.init_arrays(data.meta, 0), data.x_train, data.y_train, data.meta, 0)
    print(sorted(m for m in set(sys.modules) - before if m.startswith("torch")))
""")


def test_the_first_local_step_after_setup_imports_nothing_from_torch():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          check=True, env={"OMP_NUM_THREADS": "1", "PATH": ""})
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout
