"""``torch.optim.Adam/AdamW(fused=True)`` on tpu: ``aten._fused_adam(w)_`` as the per-tensor math of torch's
CPU fused kernel (aten/src/ATen/native/cpu/FusedAdamKernel.cpp), in float32, each list element written
back in place (the op path writes single tensors, so these in-place list ops get a handler, as GradScaler's
do in ``amp.py``). ``found_inf`` (GradScaler) selects the old values on the device instead of a host read."""
from __future__ import annotations

import torch

aten = torch.ops.aten


def _adam(adamw: bool):
    def handler(func, args, kwargs):
        names = ("self", "grads", "exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs", "state_steps")
        params, grads, exp_avgs, exp_avg_sqs, max_sqs, steps = list(args) + [kwargs[n] for n in names[len(args):]]
        lr, beta1, beta2 = kwargs["lr"], kwargs["beta1"], kwargs["beta2"]
        wd, eps, amsgrad, maximize = kwargs["weight_decay"], kwargs["eps"], kwargs["amsgrad"], kwargs["maximize"]
        grad_scale, found_inf = kwargs.get("grad_scale"), kwargs.get("found_inf")
        for i, (p, g, m, v) in enumerate(zip(params, grads, exp_avgs, exp_avg_sqs)):
            step = steps[i].to(device=p.device, dtype=torch.float32)
            param, grad, exp_avg, exp_avg_sq = p.float(), g.float(), m.float(), v.float()
            if grad_scale is not None:
                grad = grad / grad_scale.to(p.device).float()
                new_grad = grad
            if maximize:
                grad = -grad
            if wd != 0:
                if adamw:
                    param = param - lr * wd * param
                else:
                    grad = grad + param * wd
            exp_avg = torch.lerp(exp_avg, grad, 1 - beta1)
            exp_avg_sq = exp_avg_sq * beta2 + (1 - beta2) * grad * grad
            bias_correction1 = 1 - torch.pow(beta1, step)
            bias_correction2_sqrt = torch.sqrt(1 - torch.pow(beta2, step))
            if amsgrad:
                max_sq = torch.maximum(max_sqs[i].float(), exp_avg_sq)
                denom = torch.sqrt(max_sq) / bias_correction2_sqrt + eps
            else:
                denom = torch.sqrt(exp_avg_sq) / bias_correction2_sqrt + eps
            param = param - (lr / bias_correction1) * exp_avg / denom
            writes = [(p, param), (m, exp_avg), (v, exp_avg_sq)]
            if amsgrad:
                writes.append((max_sqs[i], max_sq))
            if grad_scale is not None:
                writes.append((g, new_grad))
            for dst, new in writes:
                if found_inf is not None:  # CPU's kernel returns before touching anything
                    new = torch.where(found_inf.to(p.device) == 1, dst.float(), new)
                dst.copy_(new)
        return None

    return handler


HANDLERS = {aten._fused_adam_.default: _adam(False), aten._fused_adam_.tensor_lr: _adam(False),
            aten._fused_adamw_.default: _adam(True), aten._fused_adamw_.tensor_lr: _adam(True)}
