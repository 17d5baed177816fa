# The image that runs the verification sessions, on CPU and GPU runners alike.
# torch comes with the base image: the same release as constraints-cpu.txt (a test checks), and
# its CUDA 12.6 needs an NVIDIA driver >= 560.28 (or >= 525.60 through CUDA's minor-version
# compatibility). The base is pinned by digest (the tag beside it says which release it is, and
# Dependabot proposes both together), so a tag moved on the registry changes nothing here; CI
# builds with --pull. `nox -s verify` is the default command.
FROM pytorch/pytorch:2.13.0-cuda12.6-cudnn9-runtime@sha256:6acf597eeb8e376a96580dde4952f37cc017fef732bb40bfc73f28f25e3f64b4

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    AMPTRAIN_SYSTEM_TORCH=1 \
    WANDB_MODE=offline

WORKDIR /workspace

# Dependencies first, read from the two pyproject.toml files alone (amptrain's and the
# stagegate distribution's), so this layer is rebuilt only when they change. torch is left out
# (the image has it); the rest goes into the image's environment, which the nox sessions see
# through --system-site-packages.
COPY pyproject.toml ./
COPY stagegate/pyproject.toml stagegate/
COPY tools/image_requirements.py tools/
RUN python tools/image_requirements.py > /tmp/requirements.txt \
    && python -m pip install --no-cache-dir -r /tmp/requirements.txt nox==2026.10.20 \
    && rm /tmp/requirements.txt

RUN groupadd --gid 10001 verifier \
    && useradd --create-home --uid 10001 --gid 10001 verifier \
    && chown verifier:verifier /workspace
USER 10001:10001

COPY --chown=10001:10001 . .

CMD ["nox", "-s", "verify"]
