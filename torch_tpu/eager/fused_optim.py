"""``torch.optim.Adam/AdamW/SGD/Adagrad(fused=True)`` on tpu: ``aten._fused_adam(w)_``, ``_fused_sgd_``,
``_fused_adagrad_`` as the per-tensor math of torch's CPU fused kernels (aten/src/ATen/native/cpu/Fused*.cpp), in float32, each list element written
back in place (the op path writes single tensors, so these in-place list ops get a handler, as GradScaler's
do in ``amp.py``). ``found_inf`` (GradScaler) selects the old values on the device instead of a host read."""
from __future__ import annotations

import torch

aten = torch.ops.aten


def _unscale(g, grad_scale, maximize):
    """The gradient in float32, unscaled (the value written back to ``grads``) and signed for the update."""
    grad = g.float()
    if grad_scale is not None:
        grad = grad / grad_scale.to(g.device).float()
    return grad, (-grad if maximize else grad)


def _write(writes, found_inf):
    for dst, new in writes:
        if found_inf is not None:  # CPU's kernels return before touching anything
            new = torch.where(found_inf.to(dst.device) == 1, dst.float(), new)
        dst.copy_(new)


def _sgd(func, args, kwargs):
    names = ("self", "grads", "momentum_buffer_list")
    params, grads, bufs = list(args) + [kwargs[n] for n in names[len(args):]]
    lr, wd, momentum, dampening = kwargs["lr"], kwargs["weight_decay"], kwargs["momentum"], kwargs["dampening"]
    grad_scale, found_inf = kwargs.get("grad_scale"), kwargs.get("found_inf")
    for i, (p, g) in enumerate(zip(params, grads)):
        unscaled, grad = _unscale(g, grad_scale, kwargs["maximize"])
        param = p.float()
        if wd != 0:
            grad = grad + param * wd
        writes = []
        if momentum != 0:
            buf = grad if kwargs["is_first_step"] else bufs[i].float() * momentum + (1 - dampening) * grad
            grad = grad + momentum * buf if kwargs["nesterov"] else buf
            writes.append((bufs[i], buf))
        writes.append((p, param - lr * grad))
        if grad_scale is not None:
            writes.append((g, unscaled))
        _write(writes, found_inf)


def _adagrad(func, args, kwargs):
    names = ("self", "grads", "state_sums", "state_steps")
    params, grads, sums, steps = list(args) + [kwargs[n] for n in names[len(args):]]
    lr, lr_decay, wd, eps = kwargs["lr"], kwargs["lr_decay"], kwargs["weight_decay"], kwargs["eps"]
    grad_scale, found_inf = kwargs.get("grad_scale"), kwargs.get("found_inf")
    for p, g, state_sum, step in zip(params, grads, sums, steps):
        unscaled, grad = _unscale(g, grad_scale, kwargs["maximize"])
        param = p.float()
        if wd != 0:
            grad = grad + param * wd
        clr = lr / (1 + (step.to(device=p.device, dtype=torch.float32) - 1) * lr_decay)
        new_sum = state_sum.float() + grad * grad
        writes = [(state_sum, new_sum), (p, param - clr * grad / (torch.sqrt(new_sum) + eps))]
        if grad_scale is not None:
            writes.append((g, unscaled))
        _write(writes, found_inf)


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
            aten._fused_adamw_.default: _adam(True), aten._fused_adamw_.tensor_lr: _adam(True),
            aten._fused_sgd_.default: _sgd, aten._fused_sgd_.tensor_lr: _sgd,
            aten._fused_adagrad_.default: _adagrad, aten._fused_adagrad_.tensor_lr: _adagrad}
