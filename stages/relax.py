"""DVC stage `relax@<component>-<bucket>`: see kokoro_tvm.stages.relax."""

from _common import bucket_stage

if __name__ == "__main__":
    bucket_stage("relax", __doc__, per_target=False)
