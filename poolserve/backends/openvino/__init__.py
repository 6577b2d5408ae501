"""The OpenVINO backend (`--backend openvino`, and `auto` with `--quantize int8` where OpenVINO
is installed)."""
