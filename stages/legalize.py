"""DVC stage `legalize@<component>-<bucket>`: see kokoro_tvm.stages.legalize."""

from _common import bucket_stage

if __name__ == "__main__":
    bucket_stage("legalize", __doc__, per_target=False)
