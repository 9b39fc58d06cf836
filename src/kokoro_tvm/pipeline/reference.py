"""Stage ``reference@<component>-<bucket>``: kokoro's float32 and float64 outputs at every
validation length, once per component and bucket, whatever the number of targets: the float64
run is most of a validation's time (decoder-1536: ~2/3), and it does not depend on the target.
Beside the lengths, one sentence of each of kokoro's nine languages, on its voice from the voices
stage (``eval.languages``; a build without that voice leaves the language out)."""

from __future__ import annotations

from .. import artifacts
from ..eval.case_files import cases_to_arrays
from ..eval.cases import language_cases, reference_cases
from ..eval.eager import as_float64, load_kokoro
from ..eval.languages import SENTENCES
from ..params import Params
from . import voices


def run(prm: Params, component: str, bucket: int) -> None:
    prm.check_bucket(component, bucket)
    cfg, km = load_kokoro(artifacts.kokoro_checkpoint_file(), artifacts.model_config_file())
    km64 = as_float64(km)
    cases: dict = reference_cases(
        component, bucket, km, km64, cfg, artifacts.load_array(artifacts.voice_file())
    )
    packs = voices.read_packs([s.voice for s in SENTENCES])
    cases |= language_cases(component, bucket, km, km64, cfg, packs)
    artifacts.save_weights(
        artifacts.reference_file(component, bucket), cases_to_arrays(component, cases, cfg)
    )


if __name__ == "__main__":
    from .entry import stage

    stage(__doc__, run, "component", "bucket")
