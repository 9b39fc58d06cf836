"""DVC stage `tune@<component>-<bucket>-<target>`: see kokoro_tvm.stages.tune."""

from _common import bucket_stage

if __name__ == "__main__":
    bucket_stage("tune", __doc__, per_target=True)
