"""DVC stage `build@<component>-<bucket>-<target>`: see kokoro_tvm.stages.build."""

from _common import bucket_stage

if __name__ == "__main__":
    bucket_stage("build", __doc__, per_target=True)
