"""Short runs just work: a schedule written in steps, scaled to a run shorter than it.

A config's step-valued keys (upsample steps, evaluation and checkpoint cadences, nerf's
occupancy steps) are written for its own `train.steps`; `--set train.steps=20` alone would
leave them outside the run (an error for the upsample steps). `fit_schedule` scales them
to the run and says so in one line; a run as long as its config is untouched.
"""

from __future__ import annotations

from typing import Any

from .schema import toml_value


def fit_schedule(config: Any, planned: int, set_keys: set[str], tables: dict[str, type]) -> str:
    """Scale a schedule written for `planned` steps to a shorter run that it does not fit.

    When train.steps is below `planned` (the config's own train.steps, before `--set`) and
    some key counted in steps (each table's `STEP_KEYS`: train.upsample_steps, eval.every,
    output.checkpoint_every, nerf's occupancy steps) reaches the run's end, every such key
    not given with `--set` (`set_keys`) is scaled by steps / planned: 0 (off) stays 0, a
    step at least 1, upsample steps increasing inside the run. So `--set train.steps=20`
    runs any config, in the same shape. Returns the line saying what was scaled ("": the
    schedule fits, nothing changed). A full-length run is untouched.

    config: the run's `train.config.Config` (typed loosely: config.py imports this module).
    tables: the tables `config` has, name -> their dataclass.
    """
    steps = config.train.steps
    if not 0 < steps < planned:
        return ""
    keys = [
        (table, key)
        for table, cls in tables.items()
        for key in getattr(cls, "STEP_KEYS", ())  # a table without any has none
        if f"{table}.{key}" not in set_keys
    ]
    values = {k: getattr(getattr(config, k[0]), k[1]) for k in keys}
    reach = [max(v, default=0) if isinstance(v, list) else v for v in values.values()]
    if all(r < steps for r in reach):
        return ""
    factor = steps / planned

    def scale(n: int) -> int:
        return max(1, round(n * factor)) if n > 0 else n

    changes = []
    for (table, key), value in values.items():
        if isinstance(value, list):  # increasing steps in (0, steps) where they fit
            new = [scale(n) for n in value]
            for i in range(1, len(new)):
                new[i] = max(new[i], new[i - 1] + 1)
            for i in range(len(new)):
                new[i] = min(new[i], steps - (len(new) - i))
        else:
            new = scale(value)
        if new != value:
            setattr(getattr(config, table), key, new)
            changes.append(f"{table}.{key} {toml_value(value)} -> {toml_value(new)}")
    return (
        f"train.steps = {steps} is shorter than the {planned} steps this config's schedule is "
        f"written for: scaled by {steps}/{planned}: {', '.join(changes)} (--set a key to "
        "choose it)"
    )
