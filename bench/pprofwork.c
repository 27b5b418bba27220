/* The workload of bench/pprof-lines.sh: a program whose time is spread
 * over many functions of its own and of glibc (formatting, parsing,
 * sorting, regular expressions, allocation, string search), so that a
 * profile of it has locations in many compilation units of both. */
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static unsigned long format_parse(unsigned n)
{
	char buf[64];
	double sum = 0;
	for (unsigned i = 0; i < n; i++) {
		snprintf(buf, sizeof buf, "%u.%03u %x", i, i % 1000, i * 2654435761u);
		sum += strtod(buf, NULL) + (double)strtoul(strchr(buf, ' ') + 1, NULL, 16);
	}
	return (unsigned long)sum;
}

static unsigned long sort_some(unsigned n)
{
	double *v = malloc(n * sizeof *v);
	unsigned long s = 0;
	for (unsigned i = 0; i < n; i++)
		v[i] = (double)((i * 2654435761u) % 100003);
	qsort(v, n, sizeof *v, cmp);
	for (unsigned i = 0; i < n; i += 97)
		s += (unsigned long)v[i];
	free(v);
	return s;
}

static unsigned long match_some(const regex_t *re, unsigned n)
{
	char line[128];
	unsigned long hits = 0;
	for (unsigned i = 0; i < n; i++) {
		snprintf(line, sizeof line, "user%u@host%u.example id=%u", i, i % 7, i * 31);
		if (regexec(re, line, 0, NULL, 0) == 0)
			hits++;
		if (strstr(line, "host3"))
			hits++;
	}
	return hits;
}

static unsigned long churn(unsigned n)
{
	unsigned long s = 0;
	for (unsigned i = 0; i < n; i++) {
		char *p = malloc(16 + i % 512);
		memset(p, (int)i, 16 + i % 512);
		s += (unsigned char)p[i % 16];
		char *q = strdup("a string to copy and measure");
		s += strlen(q);
		free(q);
		free(p);
	}
	return s;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 5;
	regex_t re;
	if (regcomp(&re, "^user[0-9]*3@host[0-6]\\.example id=[0-9]+$", REG_EXTENDED | REG_NOSUB)) {
		fprintf(stderr, "regcomp failed\n");
		return 1;
	}
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	unsigned long s = 0;
	do {
		s += format_parse(20000) + sort_some(20000) + match_some(&re, 5000) + churn(20000);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9 < secs);
	regfree(&re);
	printf("pprofwork: %lu\n", s);
	return 0;
}
