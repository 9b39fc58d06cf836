"""Stage ``reference@<component>-<bucket>``: kokoro's float32 and float64 outputs at every
validation length, once per component and bucket, whatever the number of targets: the float64
run is most of a validation's time (decoder-1536: ~2/3), and it does not depend on the target."""

from __future__ import annotations

from .. import artifacts
from ..eval.case_files import cases_to_arrays
from ..eval.cases import reference_cases
from ..eval.eager import as_float64, load_kokoro
from ..params import Params


def run(prm: Params, component: str, bucket: int) -> None:
    prm.check_bucket(component, bucket)
    cfg, km = load_kokoro(artifacts.kokoro_checkpoint_file(), artifacts.model_config_file())
    cases = reference_cases(
        component, bucket, km, as_float64(km), cfg, artifacts.load_array(artifacts.voice_file())
    )
    artifacts.save_weights(
        artifacts.reference_file(component, bucket), cases_to_arrays(component, cases, cfg)
    )


if __name__ == "__main__":
    from .entry import stage

    stage(__doc__, run, "component", "bucket")
