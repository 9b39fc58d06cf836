"""DVC stage `validate@<component>-<bucket>-<target>`: see kokoro_tvm.stages.validate."""

from _common import bucket_stage

if __name__ == "__main__":
    bucket_stage("validate", __doc__, per_target=True)
