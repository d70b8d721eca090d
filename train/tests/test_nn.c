/*
 * test_nn: the parts of the training layer that need no communicator: SGD against values worked
 * out by hand from torch.optim.SGD's update, parameter files (round trip, refusals that leave the
 * model untouched), the sharded loader (disjoint shards, the global batch equals one process's
 * batch), CSV parsing, the generated data sets, the random generator, and the DDP options.
 */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rt.h"

Test(sgd, momentum_and_weight_decay_as_torch)
{
    rt_tensor *w = rt_tensor_new(1, 1, 1, 1);
    rt_params p = {0};
    cr_assert_eq(rt_params_append(&p, w), RING_OK);
    rt_sgd o;
    cr_assert_eq(rt_sgd_init(&o, &p, 0.1f, 0.9f, 0.1f), RING_OK);
    w->data[0] = 1.0f;
    /* By hand, g = 0.5 every step:
     *   1: d = 0.5 + 0.1*1 = 0.6;       v = 0.6;               w = 1 - 0.06 = 0.94
     *   2: d = 0.5 + 0.1*0.94 = 0.594;  v = 0.54 + 0.594 = 1.134; w = 0.94 - 0.1134 = 0.8266
     *   3: d = 0.5 + 0.08266 = 0.58266; v = 1.0206 + 0.58266 = 1.60326; w = 0.8266 - 0.160326 = 0.666274 */
    const double want[3] = {0.94, 0.8266, 0.666274};
    for (int s = 0; s < 3; s++) {
        w->grad[0] = 0.5f;
        rt_sgd_step(&o);
        cr_expect(fabs(w->data[0] - want[s]) < 1e-6, "step %d: w = %.8f, expected %.8f", s + 1, (double)w->data[0],
                  want[s]);
    }
    rt_sgd_destroy(&o);
    rt_params_release(&p);
    rt_tensor_free(w);
}

Test(sgd, plain_without_momentum)
{
    rt_tensor *w = rt_tensor_new(1, 2, 1, 1);
    rt_params p = {0};
    cr_assert_eq(rt_params_append(&p, w), RING_OK);
    rt_sgd o;
    cr_assert_eq(rt_sgd_init(&o, &p, 0.5f, 0.0f, 0.0f), RING_OK);
    cr_expect_null(o.velocity, "no momentum buffers without momentum");
    w->data[0] = 1;
    w->data[1] = -1;
    w->grad[0] = 0.25f;
    w->grad[1] = -0.5f;
    rt_sgd_step(&o);
    cr_expect_eq(w->data[0], 0.875f);
    cr_expect_eq(w->data[1], -0.75f);
    cr_expect_eq(rt_sgd_init(&o, &p, 0.0f, 0.0f, 0.0f), RING_ERR_INVALID_ARG, "lr 0 is refused");
    cr_expect_eq(rt_sgd_init(&o, &p, 0.1f, 1.0f, 0.0f), RING_ERR_INVALID_ARG, "momentum 1 is refused");
    rt_params_release(&p);
    rt_tensor_free(w);
}

static char path[256];

static void tmpfile_init(void)
{
    snprintf(path, sizeof path, "/tmp/rt_test_nn.%d", (int)getpid());
}

static void tmpfile_fini(void)
{
    unlink(path);
}

Test(params, save_load_round_trip, .init = tmpfile_init, .fini = tmpfile_fini)
{
    size_t sizes[] = {3, 5, 2};
    rt_mlp a, b;
    cr_assert_eq(rt_mlp_init(&a, sizes, 3, RT_ACT_TANH, 1), RING_OK);
    cr_assert_eq(rt_mlp_init(&b, sizes, 3, RT_ACT_TANH, 2), RING_OK);
    cr_assert_eq(a.params.n, 4, "w0 b0 w1 b1");
    cr_expect(a.params.t[0] == a.layers[0].w && a.params.t[3] == a.layers[1].b);
    size_t n = rt_params_numel(&a.params);
    cr_assert_eq(n, 3 * 5 + 5 + 5 * 2 + 2);
    float *fa = malloc(n * sizeof *fa), *fb = malloc(n * sizeof *fb);
    rt_params_get(&a.params, fa);
    rt_params_get(&b.params, fb);
    cr_assert(memcmp(fa, fb, n * sizeof *fa) != 0, "different seeds give different models");
    cr_assert_eq(rt_params_save(&a.params, path), RING_OK, "%s", rt_last_error());
    cr_assert_eq(rt_params_load(&b.params, path), RING_OK, "%s", rt_last_error());
    rt_params_get(&b.params, fb);
    cr_expect(memcmp(fa, fb, n * sizeof *fa) == 0, "loaded bits differ");
    free(fa);
    free(fb);
    rt_mlp_destroy(&a);
    rt_mlp_destroy(&b);
}

Test(params, load_refuses_other_shapes_and_bad_files, .init = tmpfile_init, .fini = tmpfile_fini)
{
    size_t s1[] = {3, 5, 2}, s2[] = {3, 4, 2};
    rt_mlp a, b;
    cr_assert_eq(rt_mlp_init(&a, s1, 3, RT_ACT_TANH, 1), RING_OK);
    cr_assert_eq(rt_mlp_init(&b, s2, 3, RT_ACT_TANH, 2), RING_OK);
    cr_assert_eq(rt_params_save(&a.params, path), RING_OK);
    float before = b.layers[0].w->data[0];
    cr_expect_eq(rt_params_load(&b.params, path), RING_ERR_INVALID_ARG);
    cr_expect(strstr(rt_last_error(), "tensor 0") != NULL, "message: %s", rt_last_error());
    cr_expect_eq(b.layers[0].w->data[0], before, "a refused file changes nothing");

    /* Truncated: the same model's file minus its last byte. */
    FILE *f = fopen(path, "r+b");
    cr_assert(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fclose(f);
    cr_assert_eq(truncate(path, len - 1), 0);
    cr_expect_eq(rt_params_load(&a.params, path), RING_ERR_INVALID_ARG);
    cr_expect(strstr(rt_last_error(), "truncated") != NULL, "message: %s", rt_last_error());

    f = fopen(path, "w");
    fputs("not a parameter file at all", f);
    fclose(f);
    cr_expect_eq(rt_params_load(&a.params, path), RING_ERR_INVALID_ARG);
    unlink(path);
    cr_expect_eq(rt_params_load(&a.params, path), RING_ERR_SYSTEM, "a missing file is an I/O error");
    rt_mlp_destroy(&a);
    rt_mlp_destroy(&b);
}

/* ---------- loader ---------- */

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

Test(loader, shards_are_disjoint_and_make_the_global_batch)
{
    rt_dataset d;
    cr_assert_eq(rt_data_house(&d, 1003, 7), RING_OK);
    for (int nranks = 1; nranks <= 4; nranks++) {
        const size_t b = 8;
        rt_loader *l = calloc((size_t)nranks, sizeof *l), ref;
        for (int r = 0; r < nranks; r++) cr_assert_eq(rt_loader_init(&l[r], &d, b, r, nranks, 11), RING_OK);
        cr_assert_eq(rt_loader_init(&ref, &d, b * (size_t)nranks, 0, 1, 11), RING_OK);
        cr_assert_eq(l[0].steps, ref.steps, "%d ranks: %zu steps, one process %zu", nranks, l[0].steps, ref.steps);
        cr_assert_eq(l[0].steps, 1003 / (b * (size_t)nranks));
        for (uint64_t epoch = 0; epoch < 3; epoch++) {
            for (int r = 0; r < nranks; r++) rt_loader_set_epoch(&l[r], epoch);
            rt_loader_set_epoch(&ref, epoch);
            size_t total = l[0].steps * b * (size_t)nranks;
            size_t *seen = malloc(total * sizeof *seen), k = 0;
            for (size_t s = 0; s < ref.steps; s++) {
                size_t got[64], want[64], m = 0;
                for (int r = 0; r < nranks; r++)
                    for (size_t j = 0; j < b; j++) got[m++] = seen[k++] = rt_loader_index(&l[r], s, j);
                for (size_t j = 0; j < m; j++) want[j] = rt_loader_index(&ref, s, j);
                qsort(got, m, sizeof *got, cmp_size);
                qsort(want, m, sizeof *want, cmp_size);
                cr_assert(memcmp(got, want, m * sizeof *got) == 0, "%d ranks, epoch %llu, step %zu: the global batch "
                          "is not one process's batch", nranks, (unsigned long long)epoch, s);
            }
            qsort(seen, total, sizeof *seen, cmp_size);
            for (size_t i = 1; i < total; i++)
                cr_assert_neq(seen[i], seen[i - 1], "%d ranks: sample %zu drawn twice in epoch %llu", nranks, seen[i],
                              (unsigned long long)epoch);
            free(seen);
        }
        for (int r = 0; r < nranks; r++) rt_loader_destroy(&l[r]);
        rt_loader_destroy(&ref);
        free(l);
    }
    rt_dataset_free(&d);
}

Test(loader, epochs_shuffle_differently_and_reproducibly)
{
    rt_dataset d;
    cr_assert_eq(rt_data_spirals(&d, 50, 2, 1), RING_OK);
    rt_loader a, b;
    cr_assert_eq(rt_loader_init(&a, &d, 10, 0, 1, 5), RING_OK);
    cr_assert_eq(rt_loader_init(&b, &d, 10, 0, 1, 5), RING_OK);
    size_t e0[100], e1[100];
    rt_loader_set_epoch(&a, 0);
    memcpy(e0, a.perm, sizeof e0);
    rt_loader_set_epoch(&a, 1);
    memcpy(e1, a.perm, sizeof e1);
    cr_expect(memcmp(e0, e1, sizeof e0) != 0, "epoch 1 has epoch 0's order");
    rt_loader_set_epoch(&b, 1);
    cr_expect(memcmp(e1, b.perm, sizeof e1) == 0, "the same seed and epoch give another order");
    rt_graph *g;
    cr_assert_eq(rt_graph_create(&g), RING_OK);
    rt_batch bt;
    cr_assert_eq(rt_loader_batch(&a, 2, g, &bt), RING_OK);
    size_t i = rt_loader_index(&a, 2, 3);
    cr_expect_eq(bt.labels[3], d.labels[i]);
    cr_expect_eq(bt.x->data[3 * 2 + 1], d.x[i * 2 + 1]);
    cr_expect_eq(rt_loader_batch(&a, a.steps, g, &bt), RING_ERR_INVALID_ARG, "past the epoch");
    rt_loader destroyed_later;
    cr_expect_eq(rt_loader_init(&destroyed_later, &d, 60, 1, 2, 5), RING_ERR_INVALID_ARG, "50 per rank < batch 60");
    rt_graph_destroy(g);
    rt_loader_destroy(&a);
    rt_loader_destroy(&b);
    rt_dataset_free(&d);
}

/* ---------- data sets ---------- */

Test(data, house_follows_its_formula)
{
    rt_dataset d;
    cr_assert_eq(rt_data_house(&d, 2000, 3), RING_OK);
    double worst = 0, mean_err = 0;
    for (size_t i = 0; i < d.n; i++) {
        float bed = d.x[2 * i], bath = d.x[2 * i + 1];
        cr_assert(bed >= 1 && bed <= 6 && bath >= 1 && bath <= 4 && bed == floorf(bed) && bath == floorf(bath));
        double e = d.y[i] - (RT_HOUSE_W1 * bed + RT_HOUSE_W2 * bath + RT_HOUSE_B);
        mean_err += e;
        if (fabs(e) > worst) worst = fabs(e);
    }
    cr_expect_lt(worst, 0.6, "noise of deviation 0.1 stays under 6 deviations");
    cr_expect_lt(fabs(mean_err / (double)d.n), 0.01);
    rt_dataset_free(&d);
}

Test(data, spirals_are_balanced_and_bounded)
{
    rt_dataset d;
    cr_assert_eq(rt_data_spirals(&d, 100, 3, 3), RING_OK);
    int count[3] = {0};
    for (size_t i = 0; i < d.n; i++) {
        cr_assert(d.labels[i] >= 0 && d.labels[i] < 3);
        count[d.labels[i]]++;
        cr_assert_leq(hypot(d.x[2 * i], d.x[2 * i + 1]), 1.0 + 1e-6);
    }
    cr_expect(count[0] == 100 && count[1] == 100 && count[2] == 100);
    cr_expect_eq(d.nclasses, 3);
    rt_dataset_free(&d);
}

static void write_file(const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs(text, f);
    fclose(f);
}

Test(data, csv_with_header_and_blank_lines, .init = tmpfile_init, .fini = tmpfile_fini)
{
    write_file("x1, x2 ,y\r\n1,2,3\n\n4.5,-5e-1, 6\n");
    rt_dataset d;
    cr_assert_eq(rt_data_csv(&d, path, 0), RING_OK, "%s", rt_last_error());
    cr_expect_eq(d.n, 2);
    cr_expect_eq(d.nfeat, 2);
    cr_expect(d.x[0] == 1 && d.x[1] == 2 && d.x[2] == 4.5f && d.x[3] == -0.5f);
    cr_expect(d.y[0] == 3 && d.y[1] == 6);
    rt_data_standardize(&d, 1, NULL, NULL);
    cr_expect_float_eq(d.x[0] + d.x[2], 0.0f, 1e-6, "centred");
    cr_expect_float_eq(fabsf(d.x[0]), 1.0f, 1e-6, "unit deviation");
    rt_dataset_free(&d);
}

Test(data, csv_classification_and_errors, .init = tmpfile_init, .fini = tmpfile_fini)
{
    rt_dataset d;
    write_file("0.1,0.2,0\n0.3,0.4,2\n0.5,0.6,1\n");
    cr_assert_eq(rt_data_csv(&d, path, 1), RING_OK, "%s", rt_last_error());
    cr_expect_eq(d.nclasses, 3);
    cr_expect(d.labels[0] == 0 && d.labels[1] == 2 && d.labels[2] == 1);
    rt_dataset_free(&d);

    write_file("1,2,3\n4,5\n");
    cr_expect_eq(rt_data_csv(&d, path, 0), RING_ERR_INVALID_ARG);
    cr_expect(strstr(rt_last_error(), ":2: 2 columns") != NULL, "message: %s", rt_last_error());
    write_file("1,2,3\n4,x,6\n");
    cr_expect_eq(rt_data_csv(&d, path, 0), RING_ERR_INVALID_ARG);
    cr_expect(strstr(rt_last_error(), ":2: column 2 is not a number") != NULL, "message: %s", rt_last_error());
    write_file("1,2,0.5\n");
    cr_expect_eq(rt_data_csv(&d, path, 1), RING_ERR_INVALID_ARG, "a fractional class label");
    write_file("a,b\n");
    cr_expect_eq(rt_data_csv(&d, path, 0), RING_ERR_INVALID_ARG, "a header alone");
}

/* What spreadsheets and hand edits produce: a UTF-8 byte-order mark before the first sample, a
 * line of only a tab, and a number that underflows to a subnormal (strtod's ERANGE, yet a
 * number). Each failed the file before 2026-11-30. */
Test(data, csv_byte_order_mark_tab_lines_and_tiny_numbers, .init = tmpfile_init, .fini = tmpfile_fini)
{
    rt_dataset d;
    write_file("\xEF\xBB\xBF" "1,2,3\n\t\n4,5,1e-320\n");
    cr_assert_eq(rt_data_csv(&d, path, 0), RING_OK, "%s", rt_last_error());
    cr_expect_eq(d.n, 2);
    cr_expect(d.x[0] == 1 && d.x[1] == 2 && d.y[0] == 3 && d.y[1] == 0.0f, "%g %g %g %g", d.x[0], d.x[1], d.y[0], d.y[1]);
    rt_dataset_free(&d);
}

/* A first line with numbers in it is a sample, however malformed: an error, not a header that
 * drops it without a word. Only a line without any number is a header. */
Test(data, csv_malformed_first_row_is_an_error, .init = tmpfile_init, .fini = tmpfile_fini)
{
    rt_dataset d;
    write_file("1,2,x\n4,5,6\n7,8,9\n");
    cr_expect_eq(rt_data_csv(&d, path, 0), RING_ERR_INVALID_ARG, "the first row was taken for a header");
    cr_expect(strstr(rt_last_error(), ":1: column 3 is not a number") != NULL, "message: %s", rt_last_error());
    write_file("x1,2,y\n4,5,6\n");
    cr_expect_eq(rt_data_csv(&d, path, 0), RING_ERR_INVALID_ARG, "a number among the names");
    cr_expect(strstr(rt_last_error(), ":1: column 1 is not a number") != NULL, "message: %s", rt_last_error());
    write_file("x1,x2,\n4,5,6\n7,8,9\n");
    cr_assert_eq(rt_data_csv(&d, path, 0), RING_OK, "a header with an empty name: %s", rt_last_error());
    cr_expect_eq(d.n, 2);
    cr_expect(d.x[0] == 4 && d.y[1] == 9);
    rt_dataset_free(&d);
}

/* ---------- random numbers, options ---------- */

Test(rng, reproducible_and_in_range)
{
    rt_rng a, b;
    rt_rng_seed(&a, 77);
    rt_rng_seed(&b, 77);
    int hist[7] = {0};
    for (int i = 0; i < 7000; i++) {
        cr_assert_eq(rt_rng_next(&a), rt_rng_next(&b));
        double u = rt_rng_uniform(&a);
        cr_assert(u >= 0 && u < 1);
        uint64_t k = rt_rng_below(&a, 7);
        cr_assert_lt(k, 7);
        hist[k]++;
        (void)rt_rng_uniform(&b);
        (void)rt_rng_below(&b, 7);
    }
    for (int k = 0; k < 7; k++) cr_expect(hist[k] > 850 && hist[k] < 1150, "value %d drawn %d times of 7000", k, hist[k]);
}

Test(ddp_options, environment_and_defaults)
{
    rt_ddp_options o;
    unsetenv("RING_DDP_BUCKET_MB");
    unsetenv("RING_DDP_FIRST_BUCKET_MB");
    cr_assert_eq(rt_ddp_options_init(&o), RING_OK);
    cr_expect(o.bucket_mb == 25.0 && o.first_bucket_mb == 1.0, "PyTorch's defaults");
    setenv("RING_DDP_BUCKET_MB", "0.5", 1);
    cr_assert_eq(rt_ddp_options_init(&o), RING_OK);
    cr_expect(o.bucket_mb == 0.5);
    setenv("RING_DDP_BUCKET_MB", "lots", 1);
    cr_expect_eq(rt_ddp_options_init(&o), RING_ERR_INVALID_ARG);
    cr_expect(strstr(rt_last_error(), "RING_DDP_BUCKET_MB=\"lots\"") != NULL, "message: %s", rt_last_error());
    setenv("RING_DDP_BUCKET_MB", "0", 1);
    cr_expect_eq(rt_ddp_options_init(&o), RING_ERR_INVALID_ARG);
}
