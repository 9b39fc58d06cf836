"""DVC stage `bench@<component>-<bucket>-<target>`: see kokoro_tvm.stages.bench."""

from _common import bucket_stage

if __name__ == "__main__":
    bucket_stage("bench", __doc__, per_target=True)
