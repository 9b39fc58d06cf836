"""DVC stage `export@<component>-<bucket>`: see kokoro_tvm.stages.export."""

from _common import bucket_stage

if __name__ == "__main__":
    bucket_stage("export", __doc__, per_target=False)
