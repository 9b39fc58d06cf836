"""Inputs on which the tiny random-weight decoder's float32 paths are judged against float64.

That model's audio is chaotic at some inputs: at ``example_inputs`` seed 1, relative input
perturbations of 1e-6 move float64 kokoro itself to 32 dB log-mel SNR, and at seed 0 float32 kokoro
lands 30 dB from float64; there any float32 path (kokoro's, a library's, ONNX Runtime's) falls
into one basin or the other by chance, and a criterion relative to float32 kokoro judges luck.
``test_schedule`` checks that this seed stays off such a point.
"""

#: ``example_inputs`` seed for the tiny decoder: float64 kokoro stable under 1e-6 perturbations,
#: float32 kokoro near it
DECODER_SEED = 3
